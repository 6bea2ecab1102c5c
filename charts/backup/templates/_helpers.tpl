{{/*
Names, labels and settings of the backup chart (charts/README.md is the
contract).
*/}}

{{- define "backup.name" -}}onprem-backup{{- end -}}

{{- define "backup.selectorLabels" -}}
app.kubernetes.io/name: {{ include "backup.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{- define "backup.labels" -}}
{{ include "backup.selectorLabels" . }}
app.kubernetes.io/component: backup
app.kubernetes.io/part-of: onprem
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ required "global.platform.version is required" .Values.global.platform.version | toString | quote }}
{{- end -}}

{{/* The endpoint's port: explicit, else 443 (https) or 80 (http). */}}
{{- define "backup.s3Port" -}}
{{- $u := urlParse (required "s3.endpoint is required" .Values.s3.endpoint) -}}
{{- $host := get $u "host" -}}
{{- if regexMatch ":[0-9]+$" $host -}}
{{- regexFind "[0-9]+$" $host -}}
{{- else if eq (get $u "scheme") "http" -}}
80
{{- else -}}
443
{{- end -}}
{{- end -}}

{{/* The bucket address: s3://BUCKET[/PREFIX]. */}}
{{- define "backup.to" -}}
{{- $to := printf "s3://%s" (required "s3.bucket is required" .Values.s3.bucket) -}}
{{- with .Values.s3.prefix }}{{ $to = printf "%s/%s" $to (trimAll "/" .) }}{{ end -}}
{{- $to -}}
{{- end -}}
