{{/*
Names, labels and security settings of the postgresql chart (see
charts/README.md, the values contract). Object names are fixed, never the
release name, so that other charts and the installer can refer to them.
*/}}

{{- define "postgresql.name" -}}postgresql{{- end -}}

{{/* Selector labels: name and instance only (selectors are immutable). */}}
{{- define "postgresql.selectorLabels" -}}
app.kubernetes.io/name: {{ include "postgresql.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/*
Labels that never change from one platform version to the next. Used on
volumeClaimTemplates, which a StatefulSet does not let you change, and on
pod templates, so that an upgrade restarts a pod only when it changes.
*/}}
{{- define "postgresql.stableLabels" -}}
{{ include "postgresql.selectorLabels" . }}
app.kubernetes.io/component: database
app.kubernetes.io/part-of: onprem
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Labels of every object; pod templates of long-running pods take the stable ones. */}}
{{- define "postgresql.labels" -}}
{{ include "postgresql.stableLabels" . }}
app.kubernetes.io/version: {{ required "global.platform.version is required" .Values.global.platform.version | toString | quote }}
{{- end -}}

{{/* imagePullSecrets from global.imagePullSecrets (a list of Secret names). */}}
{{- define "postgresql.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets -}}
imagePullSecrets:
{{- range . }}
  - name: {{ if kindIs "map" . }}{{ .name | quote }}{{ else }}{{ . | quote }}{{ end }}
{{- end }}
{{- end -}}
{{- end -}}

{{/*
Pod security context. Argument: dict with uid, gid and optionally fsGroup
(set where the pod writes to a volume or reads mounted Secret files).
*/}}
{{- define "postgresql.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ .gid }}
{{- if .fsGroup }}
fsGroup: {{ .fsGroup }}
fsGroupChangePolicy: OnRootMismatch
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
The restricted container security context. Argument: dict with uid and gid.
The root filesystem is read-only; writable paths are volumes.
*/}}
{{- define "postgresql.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ .gid }}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* resources of a container, straight from values. */}}
{{- define "postgresql.resources" -}}
{{- with .Values.resources -}}
resources:
  {{- toYaml . | nindent 2 }}
{{- else -}}
resources: {}
{{- end -}}
{{- end -}}

{{/*
high availability: global.availability is "high". The chart then runs
ha.replicas instances (3 by default) managed by Patroni instead of one
standalone server.
*/}}
{{- define "postgresql.ha" -}}
{{- if eq (toString .Values.global.availability) "high" -}}true{{- end -}}
{{- end -}}

{{/*
Replicas of the StatefulSet. A standalone server runs 0 or 1: several
independent copies behind one Service would each hold a part of the data.
With high availability, ha.replicas members of one Patroni cluster (3 or
more, an odd number keeps a majority when one is lost; 0 stops it).
*/}}
{{- define "postgresql.replicas" -}}
{{- if include "postgresql.ha" . -}}
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
{{ include "postgresql.selectorLabels" . }}
onprem.dev/patroni-cluster: {{ include "postgresql.name" . }}
{{- end -}}

{{/*
storageClassName of the data volume: persistence.storageClass, else
global.storageClass, else left out (the cluster's default class). "-"
writes an explicit "" (no dynamic provisioning: bind a pre-created volume).
*/}}
{{- define "postgresql.storageClassName" -}}
{{- $sc := .Values.persistence.storageClass | default .Values.global.storageClass | toString -}}
{{- if eq $sc "-" -}}
storageClassName: ""
{{- else if $sc -}}
storageClassName: {{ $sc | quote }}
{{- end -}}
{{- end -}}

{{/*
The data volumeClaimTemplate (volumeClaimTemplates cannot be changed once
the StatefulSet exists: keep everything here stable across versions).
*/}}
{{- define "postgresql.dataClaim" -}}
- metadata:
    name: data
    labels:
      {{- include "postgresql.stableLabels" . | nindent 6 }}
  spec:
    accessModes:
      - ReadWriteOnce
    {{- with include "postgresql.storageClassName" . }}
    {{- . | nindent 4 }}
    {{- end }}
    resources:
      requests:
        storage: {{ required "persistence.size is required" .Values.persistence.size | quote }}
{{- end -}}

{{/*
The container's command and args: command and args from values when set;
with a command override and no args, no args (the defaults belong to the
default program). Argument: dict with ctx (the root context) and args (the
default args, a list).
*/}}
{{- define "postgresql.commandArgs" -}}
{{- $v := .ctx.Values -}}
{{- with $v.command }}
command:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.args }}
args:
  {{- toYaml $v.args | nindent 2 }}
{{- else if and (not $v.command) .args }}
args:
  {{- toYaml .args | nindent 2 }}
{{- end }}
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
