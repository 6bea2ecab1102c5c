{{/*
Settings added to the image's /etc/rabbitmq/conf.d (its 10-defaults.conf
stays). Logs go to the console only: the root filesystem is read-only and a
log file would grow without bound. With a memory limit, RabbitMQ computes
its memory watermark from the limit instead of the node's memory, which it
would otherwise use (and then be killed long before it throttles
publishers).
*/}}
{{- define "rabbitmq.config" -}}
log.console = true
log.console.level = info
log.file = false
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) }}
{{- if $limit }}
total_memory_available_override_value = {{ include "rabbitmq.bytes" $limit }}
vm_memory_high_watermark.relative = 0.6
{{- end }}
{{- end -}}

{{/*
The default command. Erlang refuses a cookie file that its group or others
may read, and a Secret volume cannot give a non-root user a file of its own:
with fsGroup the kubelet makes the Secret's files root-owned and
group-readable (0400 becomes 0440), and it would add group bits again at
every mount to a cookie kept on the data volume. (RABBITMQ_ERLANG_COOKIE, a
value and not a path, is deprecated.) So the Secret's erlang-cookie key is
mounted read-only (mode 0400, readable through the pod's fsGroup) and, at
every start, copied to $HOME/.erlang.cookie (/var/lib/rabbitmq, the data
volume) with mode 0400, owned by the rabbitmq user, before the image's
entrypoint starts the server. The cookie is in no pod spec and no
environment variable; the CLI tools (kubectl exec) find it in $HOME too.
*/}}
{{- define "rabbitmq.defaultCommand" -}}
- sh
- -c
- |
  set -eu
  cookie="$HOME/.erlang.cookie"
  rm -f "$cookie"
  (umask 0377 && cat /etc/rabbitmq-cookie/erlang-cookie > "$cookie")
  exec docker-entrypoint.sh rabbitmq-server
{{- end -}}
