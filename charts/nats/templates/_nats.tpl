{{/*
The server's configuration. Not the image's default file: that one opens a
cluster port with a well-known route password. JetStream's limits follow
the volume (90% of it) and the memory limit (a quarter of it); without
them the server would size them from the node's disk and memory.
*/}}
{{- define "nats.config" -}}
server_name: $POD_NAME
port: 4222
http_port: 8222
jetstream {
  store_dir: /data
  max_file_store: {{ printf "%.0f" (mulf (include "common.bytes" (dict "ctx" . "quantity" .Values.persistence.size) | float64) 0.9) }}
  {{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) }}
  {{- if $limit }}
  max_memory_store: {{ printf "%.0f" (mulf (include "common.bytes" (dict "ctx" . "quantity" $limit) | float64) 0.25) }}
  {{- end }}
}
{{- end -}}
