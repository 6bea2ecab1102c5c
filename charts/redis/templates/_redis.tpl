{{/*
The default command. The password comes from the environment, expanded by
the shell, so that it is in no pod spec; redis-server then overwrites its
process title, so it is not in the process list either. With a memory
limit, maxmemory is 3/4 of it (room for the copy-on-write of a background
save) and writes fail once it is reached rather than the pod being killed;
nothing is evicted: build logs must not disappear.
*/}}
{{- define "redis.defaultCommand" -}}
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) -}}
- sh
- -c
- >-
  exec redis-server --port 6379 --requirepass "$REDIS_PASSWORD"
  --dir /data --appendonly yes
  {{- if $limit }}
  --maxmemory {{ printf "%.0f" (mulf (include "common.bytes" (dict "ctx" . "quantity" $limit) | float64) 0.75) }}
  --maxmemory-policy noeviction
  {{- end }}
{{- end -}}
