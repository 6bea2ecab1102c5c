{{/*
What the server charts (the databases, the queues) share: their data
volume, their replicas, the switch to high availability, sizes.
*/}}

{{/*
storageClassName of the data volume: persistence.storageClass, else
global.storageClass, else left out (the cluster's default class). "-"
writes an explicit "" (no dynamic provisioning: bind a pre-created volume).
*/}}
{{- define "common.storageClassName" -}}
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
Argument: the root context.
*/}}
{{- define "common.dataClaim" -}}
- metadata:
    name: data
    labels:
      {{- include "common.stableLabels" . | nindent 6 }}
  spec:
    accessModes:
      - ReadWriteOnce
    {{- with include "common.storageClassName" . }}
    {{- . | nindent 4 }}
    {{- end }}
    resources:
      requests:
        storage: {{ required "persistence.size is required" .Values.persistence.size | quote }}
{{- end -}}

{{/*
Replicas of a single-instance server (a chart with no clustering). Several
independent copies behind one Service would each hold a part of the data,
so any number above 1 is refused (0 is allowed, to stop the server for
maintenance). Argument: the root context.
*/}}
{{- define "common.standaloneReplicas" -}}
{{- $r := int .Values.replicas -}}
{{- if or (lt $r 0) (gt $r 1) -}}
{{- fail (printf "%s: replicas is %d, but this chart runs a single standalone server (no clustering), so it must be 0 or 1" .Chart.Name $r) -}}
{{- end -}}
{{- $r -}}
{{- end -}}

{{/*
High availability: global.availability is "high" ("true", else empty).
What the chart then runs is its own (docs/availability.md).
*/}}
{{- define "common.ha" -}}
{{- if eq (toString .Values.global.availability) "high" -}}true{{- end -}}
{{- end -}}

{{/* The label that selects the members of a replicated server. */}}
{{- define "common.haLabels" -}}
onprem.dev/{{ .Chart.Name }}-cluster: {{ include "common.name" . }}
{{- end -}}

{{/*
A Kubernetes quantity (512Mi, 1Gi, 1.5G, 1000000) as a number of bytes.
Argument: dict with ctx (the root context) and quantity.
*/}}
{{- define "common.bytes" -}}
{{- $q := toString .quantity -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $num $q -}}
{{- $factors := dict "" 1.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 -}}
{{- if or (not $num) (not (hasKey $factors $unit)) -}}
{{- fail (printf "%s: cannot read the quantity %q (expected a number with an optional unit such as Mi, Gi, M or G)" .ctx.Chart.Name $q) -}}
{{- end -}}
{{- printf "%.0f" (mulf (float64 $num) (get $factors $unit)) -}}
{{- end -}}

{{/*
The PodDisruptionBudget of the chart's pods (charts/README.md: every
workload with more than one replica has one): one pod at a time, selected
by the selector labels. A whole object; the caller says when. Argument:
the root context.
*/}}
{{- define "common.podDisruptionBudget" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "common.name" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "common.labels" . | nindent 4 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      {{- include "common.selectorLabels" . | nindent 6 }}
{{- end -}}
