{{/*
The backup chart's own helpers. Names, labels and the rest every chart
shares are the library chart's (charts/common, "common.*"); the name and
component come from Chart.yaml's annotations.
*/}}

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
