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
total_memory_available_override_value = {{ include "common.bytes" (dict "ctx" . "quantity" $limit) }}
vm_memory_high_watermark.relative = 0.6
{{- end }}
{{- if include "common.ha" . }}
{{- $name := include "common.name" . }}
# High availability: the nodes find each other through the Kubernetes API
# (the endpoints of the headless Service, by pod hostname).
cluster_formation.peer_discovery_backend = rabbit_peer_discovery_k8s
cluster_formation.k8s.host = kubernetes.default.svc
cluster_formation.k8s.address_type = hostname
cluster_formation.k8s.service_name = {{ $name }}-headless
cluster_formation.k8s.hostname_suffix = .{{ $name }}-headless.{{ .Release.Namespace }}
cluster_formation.target_cluster_size_hint = {{ include "rabbitmq.replicas" . }}
# A node that is gone is only reported, never removed from the cluster: it
# is a lost node that will return (its quorum queue members with it).
cluster_formation.node_cleanup.only_log_warning = true
# A node cut off from the majority stops serving (its clients reconnect,
# through the Service, to a node of the majority) instead of accepting
# messages that the majority would never see.
cluster_partition_handling = pause_minority
# Quorum queue leaders spread over the nodes.
queue_leader_locator = balanced
# The virtual host / and its default queue type (quorum), created on the
# cluster's first boot.
definitions.import_backend = local_filesystem
definitions.local.path = /etc/rabbitmq-onprem/definitions.json
{{- end }}
{{- end -}}

{{/*
High availability: the definitions imported at every boot. The platform's
services declare their queues without a type: on this virtual host they
are quorum queues, replicated on every node, so a message whose publish was
confirmed survives the loss of any one node.
*/}}
{{- define "rabbitmq.definitions" -}}
{"vhosts": [{"name": "/", "default_queue_type": "quorum", "metadata": {"default_queue_type": "quorum", "description": "the platform", "tags": []}}]}
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
  {{- if include "common.ha" . }}
  # Definitions imported at boot (the quorum default) mean RabbitMQ seeds
  # no user: once the node runs, the platform's user is created unless the
  # cluster has it (its secret read from standard input, never an argument).
  (
    # (await_startup fails at once while the node is not yet reachable.)
    n=0
    until rabbitmqctl -q await_startup >/dev/null 2>&1; do
      n=$((n + 1))
      [ "$n" -lt 300 ] || exit 0
      sleep 3
    done
    u="$RABBITMQ_DEFAULT_USER"
    rabbitmqctl -q list_users --no-table-headers 2>/dev/null | cut -f1 | grep -qxF "$u" && exit 0
    printf '%s\n' "$RABBITMQ_DEFAULT_PASS" | rabbitmqctl -q add_user "$u" >/dev/null 2>&1 || exit 0
    rabbitmqctl -q set_user_tags "$u" administrator
    rabbitmqctl -q set_permissions --vhost / "$u" '.*' '.*' '.*'
    echo "onprem: created the user $u"
  ) &
  {{- end }}
  exec docker-entrypoint.sh rabbitmq-server
{{- end -}}
