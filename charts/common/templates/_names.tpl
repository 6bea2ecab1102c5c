{{/*
Names and labels (charts/README.md, the values contract). Every helper
takes the chart's root context. Two facts come from the calling chart's
Chart.yaml, so that the helpers need no argument:

  annotations:
    onprem.dev/component: database   # app.kubernetes.io/component (required)
    onprem.dev/name: ingress-controller  # object name; default: the chart's name

Object names are fixed, never the release name, so that other charts and
the installer can refer to them.
*/}}

{{/* The name of the chart's objects: onprem.dev/name, else the chart's name. */}}
{{- define "common.name" -}}
{{- index (.Chart.Annotations | default dict) "onprem.dev/name" | default .Chart.Name -}}
{{- end -}}

{{/* app.kubernetes.io/component, from the chart's onprem.dev/component. */}}
{{- define "common.component" -}}
{{- required (printf "%s: Chart.yaml needs the annotation onprem.dev/component (app.kubernetes.io/component of its objects)" .Chart.Name) (index (.Chart.Annotations | default dict) "onprem.dev/component") -}}
{{- end -}}

{{/* Selector labels: name and instance only (selectors are immutable). */}}
{{- define "common.selectorLabels" -}}
app.kubernetes.io/name: {{ include "common.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/*
Labels that never change from one platform version to the next. Used on
volumeClaimTemplates, which a StatefulSet does not let you change, and on
pod templates, so that an upgrade restarts a pod only when it changes.
*/}}
{{- define "common.stableLabels" -}}
{{ include "common.selectorLabels" . }}
app.kubernetes.io/component: {{ include "common.component" . }}
app.kubernetes.io/part-of: onprem
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Labels of every object; pod templates of long-running pods take the stable ones. */}}
{{- define "common.labels" -}}
{{ include "common.stableLabels" . }}
app.kubernetes.io/version: {{ required "global.platform.version is required" .Values.global.platform.version | toString | quote }}
{{- end -}}
