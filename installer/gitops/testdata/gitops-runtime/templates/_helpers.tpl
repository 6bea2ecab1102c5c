{{- define "rt.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
onprem.dev/runtime: {{ .root.Values.global.runtime.name | quote }}
{{- end -}}

{{- /* An image from its values: registry (optional), repository and tag,
  each required where the upstream subchart requires it. */ -}}
{{- define "rt.image" -}}
{{- $repo := required (printf "%s.repository is required" .path) .image.repository -}}
{{- $tag := required (printf "%s.tag is required" .path) .tag -}}
{{- if .image.registry -}}{{ .image.registry }}/{{ end -}}{{ $repo }}:{{ $tag }}
{{- end -}}

{{- /* What the upstream templates refuse to render without. */ -}}
{{- define "rt.validate" -}}
{{- $cf := .Values.global.codefresh -}}
{{- $_ := required "global.runtime.name is required" .Values.global.runtime.name -}}
{{- $_ := required "global.codefresh.url is required" $cf.url -}}
{{- $_ := required "global.codefresh.accountId is required" $cf.accountId -}}
{{- if not (or $cf.userToken.token $cf.userToken.secretKeyRef.name) -}}
{{- fail "global.codefresh.userToken: one of token or secretKeyRef is required" -}}
{{- end -}}
{{- if and $cf.userToken.secretKeyRef.name (not $cf.userToken.secretKeyRef.key) -}}
{{- fail "global.codefresh.userToken.secretKeyRef.key is required" -}}
{{- end -}}
{{- $ing := .Values.global.runtime.ingress -}}
{{- if $ing.enabled -}}
{{- $_ := required "global.runtime.ingress.className is required with ingress.enabled" $ing.className -}}
{{- if not $ing.hosts -}}{{- fail "global.runtime.ingress.hosts: at least one host is required with ingress.enabled" -}}{{- end -}}
{{- else if not (or (index .Values "tunnel-client" "enabled") .Values.global.runtime.ingressUrl) -}}
{{- fail "global.runtime: enable ingress, the tunnel client (tunnel-client.enabled) or give ingressUrl" -}}
{{- end -}}
{{- end -}}

{{- define "rt.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 999
  runAsGroup: 999
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "rt.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end -}}
