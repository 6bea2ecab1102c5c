{{/*
Names, labels and security settings of the redis chart (see
charts/README.md, the values contract). Object names are fixed, never the
release name, so that other charts and the installer can refer to them.
*/}}

{{- define "redis.name" -}}redis{{- end -}}

{{/* Selector labels: name and instance only (selectors are immutable). */}}
{{- define "redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "redis.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/*
Labels that never change from one platform version to the next. Used on
volumeClaimTemplates, which a StatefulSet does not let you change, and on
pod templates, so that an upgrade restarts a pod only when it changes.
*/}}
{{- define "redis.stableLabels" -}}
{{ include "redis.selectorLabels" . }}
app.kubernetes.io/component: cache
app.kubernetes.io/part-of: onprem
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Labels of every object; pod templates of long-running pods take the stable ones. */}}
{{- define "redis.labels" -}}
{{ include "redis.stableLabels" . }}
app.kubernetes.io/version: {{ required "global.platform.version is required" .Values.global.platform.version | toString | quote }}
{{- end -}}

{{/* imagePullSecrets from global.imagePullSecrets (a list of Secret names). */}}
{{- define "redis.imagePullSecrets" -}}
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
{{- define "redis.podSecurityContext" -}}
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
{{- define "redis.containerSecurityContext" -}}
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
{{- define "redis.resources" -}}
{{- with .Values.resources -}}
resources:
  {{- toYaml . | nindent 2 }}
{{- else -}}
resources: {}
{{- end -}}
{{- end -}}

{{/*
Replicas. Without high availability this chart runs one standalone
server: several independent copies behind one Service would each hold a
part of the data, so any number above 1 is refused (0 is allowed, to stop
the server for maintenance). With it, ha.replicas members: one master and
its replicas, with Sentinel.
*/}}
{{- define "redis.replicas" -}}
{{- if include "redis.ha" . -}}
{{- $r := int .Values.ha.replicas -}}
{{- if and (ne $r 0) (lt $r 3) -}}
{{- fail (printf "redis: ha.replicas is %d, but high availability needs 3 or more members, so that the Sentinels left after losing one are a majority that can elect a new master (0 stops them)" $r) -}}
{{- end -}}
{{- $r -}}
{{- else -}}
{{- $r := int .Values.replicas -}}
{{- if or (lt $r 0) (gt $r 1) -}}
{{- fail (printf "redis: replicas is %d, but without spec.availability high this chart runs a single standalone server (no replication), so it must be 0 or 1" $r) -}}
{{- end -}}
{{- $r -}}
{{- end -}}
{{- end -}}

{{/*
High availability: global.availability is "high". The chart then runs
ha.replicas members (3 by default), one per node of the cluster: a master
and replicas of it, each with a Sentinel beside it that promotes a replica
when the master is lost, and a keeper that points the Service redis at the
master (docs/availability.md).
*/}}
{{- define "redis.ha" -}}
{{- if eq (toString .Values.global.availability) "high" -}}true{{- end -}}
{{- end -}}

{{/* The label that selects the members of the replicated Redis. */}}
{{- define "redis.haLabels" -}}
onprem.dev/redis-cluster: {{ include "redis.name" . }}
{{- end -}}

{{/*
storageClassName of the data volume: persistence.storageClass, else
global.storageClass, else left out (the cluster's default class). "-"
writes an explicit "" (no dynamic provisioning: bind a pre-created volume).
*/}}
{{- define "redis.storageClassName" -}}
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
{{- define "redis.dataClaim" -}}
- metadata:
    name: data
    labels:
      {{- include "redis.stableLabels" . | nindent 6 }}
  spec:
    accessModes:
      - ReadWriteOnce
    {{- with include "redis.storageClassName" . }}
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
{{- define "redis.commandArgs" -}}
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
A Kubernetes quantity (512Mi, 1Gi, 1.5G, 1000000) as a number of bytes.
*/}}
{{- define "redis.bytes" -}}
{{- $q := toString . -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $num $q -}}
{{- $factors := dict "" 1.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 -}}
{{- if or (not $num) (not (hasKey $factors $unit)) -}}
{{- fail (printf "redis: cannot read the quantity %q (expected a number with an optional unit such as Mi, Gi, M or G)" $q) -}}
{{- end -}}
{{- printf "%.0f" (mulf (float64 $num) (get $factors $unit)) -}}
{{- end -}}
