{{/*
The postgresql chart's own helpers (charts/README.md is the values
contract). Names, labels, security contexts, the data volume and the rest
every chart shares are the library chart's (charts/common, "common.*").

High availability ("common.ha": global.availability is "high"): the chart
then runs ha.replicas instances (3 by default) managed by Patroni instead
of one standalone server.
*/}}

{{/*
Replicas of the StatefulSet. A standalone server runs 0 or 1: several
independent copies behind one Service would each hold a part of the data.
With high availability, ha.replicas members of one Patroni cluster (3 or
more, an odd number keeps a majority when one is lost; 0 stops it).
*/}}
{{- define "postgresql.replicas" -}}
{{- if include "common.ha" . -}}
{{- $r := int .Values.ha.replicas -}}
{{- if and (ne $r 0) (lt $r 3) -}}
{{- fail (printf "postgresql: ha.replicas is %d, but high availability needs 3 or more members (0 stops the cluster)" $r) -}}
{{- end -}}
{{- $r -}}
{{- else -}}
{{- $r := int .Values.replicas -}}
{{- if or (lt $r 0) (gt $r 1) -}}
{{- fail (printf "postgresql: replicas is %d, but without spec.availability high this chart runs a single standalone server (no clustering), so it must be 0 or 1" $r) -}}
{{- end -}}
{{- $r -}}
{{- end -}}
{{- end -}}

{{/* Labels Patroni selects its members by (kubernetes.labels plus its scope label). */}}
{{- define "postgresql.patroniLabels" -}}
{{ include "common.selectorLabels" . }}
onprem.dev/patroni-cluster: {{ include "common.name" . }}
{{- end -}}

{{/*
Patroni's configuration that every member shares (see patroni.yaml).
Argument: dict with ctx (the root context) and name (the cluster's scope).
*/}}
{{- define "postgresql.patroniMember" -}}
scope: {{ .name }}
kubernetes:
  labels:
    app.kubernetes.io/name: {{ .name }}
    app.kubernetes.io/instance: {{ .ctx.Release.Name | quote }}
  scope_label: onprem.dev/patroni-cluster
  role_label: onprem.dev/postgresql-role
  # The leader lock is the Endpoints of the Service named after the scope:
  # that Service always reaches the primary.
  use_endpoints: true
  ports:
    - name: postgresql
      port: 5432
restapi:
  listen: 0.0.0.0:8008
postgresql:
  listen: 0.0.0.0:5432
  data_dir: /var/lib/postgresql/data/pgdata
  pgpass: /tmp/pgpass
  use_unix_socket: true
  use_unix_socket_repl: false
  parameters:
    unix_socket_directories: /var/run/postgresql
  pg_hba:
    # Inside the pod: Patroni and onprem's scripts (which read the admin's
    # Secret anyway).
    - local all all trust
    - host replication all 0.0.0.0/0 scram-sha-256
    - host replication all ::/0 scram-sha-256
    - host all all 0.0.0.0/0 scram-sha-256
    - host all all ::/0 scram-sha-256
  callbacks:
    on_start: /etc/patroni/on-role.sh
    on_role_change: /etc/patroni/on-role.sh
{{- end -}}
