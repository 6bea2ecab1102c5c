{{/*
Names, labels and security settings of the rabbitmq chart (see
charts/README.md, the values contract). Object names are fixed, never the
release name, so that other charts and the installer can refer to them.
*/}}

{{- define "rabbitmq.name" -}}rabbitmq{{- end -}}

{{/* Selector labels: name and instance only (selectors are immutable). */}}
{{- define "rabbitmq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rabbitmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/*
Labels that never change from one platform version to the next. Used on
volumeClaimTemplates, which a StatefulSet does not let you change, and on
pod templates, so that an upgrade restarts a pod only when it changes.
*/}}
{{- define "rabbitmq.stableLabels" -}}
{{ include "rabbitmq.selectorLabels" . }}
app.kubernetes.io/component: queue
app.kubernetes.io/part-of: onprem
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Labels of every object; pod templates of long-running pods take the stable ones. */}}
{{- define "rabbitmq.labels" -}}
{{ include "rabbitmq.stableLabels" . }}
app.kubernetes.io/version: {{ required "global.platform.version is required" .Values.global.platform.version | toString | quote }}
{{- end -}}

{{/* imagePullSecrets from global.imagePullSecrets (a list of Secret names). */}}
{{- define "rabbitmq.imagePullSecrets" -}}
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
{{- define "rabbitmq.podSecurityContext" -}}
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
{{- define "rabbitmq.containerSecurityContext" -}}
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
{{- define "rabbitmq.resources" -}}
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
the server for maintenance). With it, ha.replicas nodes of one cluster.
*/}}
{{- define "rabbitmq.replicas" -}}
{{- if include "rabbitmq.ha" . -}}
{{- $r := int .Values.ha.replicas -}}
{{- if and (ne $r 0) (lt $r 3) -}}
{{- fail (printf "rabbitmq: ha.replicas is %d, but high availability needs 3 or more nodes, so that losing one leaves a majority of every quorum queue (0 stops the cluster)" $r) -}}
{{- end -}}
{{- $r -}}
{{- else -}}
{{- $r := int .Values.replicas -}}
{{- if or (lt $r 0) (gt $r 1) -}}
{{- fail (printf "rabbitmq: replicas is %d, but without spec.availability high this chart runs a single standalone server (no clustering), so it must be 0 or 1" $r) -}}
{{- end -}}
{{- $r -}}
{{- end -}}
{{- end -}}

{{/*
High availability: global.availability is "high". The chart then runs
ha.replicas RabbitMQ nodes (3 by default) as one cluster, formed through
the Kubernetes API (the peer discovery plugin reads the headless Service's
endpoints), one node per node of the cluster, whose queues are quorum
queues (replicated by Raft on every node).
*/}}
{{- define "rabbitmq.ha" -}}
{{- if eq (toString .Values.global.availability) "high" -}}true{{- end -}}
{{- end -}}

{{/*
storageClassName of the data volume: persistence.storageClass, else
global.storageClass, else left out (the cluster's default class). "-"
writes an explicit "" (no dynamic provisioning: bind a pre-created volume).
*/}}
{{- define "rabbitmq.storageClassName" -}}
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
{{- define "rabbitmq.dataClaim" -}}
- metadata:
    name: data
    labels:
      {{- include "rabbitmq.stableLabels" . | nindent 6 }}
  spec:
    accessModes:
      - ReadWriteOnce
    {{- with include "rabbitmq.storageClassName" . }}
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
{{- define "rabbitmq.commandArgs" -}}
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
{{- define "rabbitmq.bytes" -}}
{{- $q := toString . -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $num $q -}}
{{- $factors := dict "" 1.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 -}}
{{- if or (not $num) (not (hasKey $factors $unit)) -}}
{{- fail (printf "rabbitmq: cannot read the quantity %q (expected a number with an optional unit such as Mi, Gi, M or G)" $q) -}}
{{- end -}}
{{- printf "%.0f" (mulf (float64 $num) (get $factors $unit)) -}}
{{- end -}}
