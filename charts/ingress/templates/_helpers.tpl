{{/*
Names, labels and security settings of the ingress-controller chart (see
charts/README.md, the values contract). Object names are fixed, never the
release name, so that other charts and the installer can refer to them.
*/}}

{{- define "ingress.name" -}}ingress-controller{{- end -}}

{{/* Selector labels: name and instance only (selectors are immutable). */}}
{{- define "ingress.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ingress.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/*
Labels that never change from one platform version to the next. Used on
volumeClaimTemplates, which a StatefulSet does not let you change, and on
pod templates, so that an upgrade restarts a pod only when it changes.
*/}}
{{- define "ingress.stableLabels" -}}
{{ include "ingress.selectorLabels" . }}
app.kubernetes.io/component: ingress
app.kubernetes.io/part-of: onprem
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Labels of every object; pod templates of long-running pods take the stable ones. */}}
{{- define "ingress.labels" -}}
{{ include "ingress.stableLabels" . }}
app.kubernetes.io/version: {{ required "global.platform.version is required" .Values.global.platform.version | toString | quote }}
{{- end -}}

{{/* imagePullSecrets from global.imagePullSecrets (a list of Secret names). */}}
{{- define "ingress.imagePullSecrets" -}}
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
{{- define "ingress.podSecurityContext" -}}
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
{{- define "ingress.containerSecurityContext" -}}
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
{{- define "ingress.resources" -}}
{{- with .Values.resources -}}
resources:
  {{- toYaml . | nindent 2 }}
{{- else -}}
resources: {}
{{- end -}}
{{- end -}}
