{{/*
Names, labels and checks of the runner chart (see charts/README.md, the
values contract). Object names are fixed: each runner has a namespace of its
own (and one for its build engine), so names never clash.
*/}}

{{- define "runner.validate" -}}
{{- $v := .Values -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$" (toString $v.name)) -}}
{{- fail (printf "name: %q must be a DNS label of at most 40 characters" (toString $v.name)) -}}
{{- end -}}
{{- $c := int $v.concurrency -}}
{{- if or (lt $c 1) (gt $c 256) -}}
{{- fail (printf "concurrency: %v must be between 1 and 256" $v.concurrency) -}}
{{- end -}}
{{- if not $v.images.agent -}}
{{- fail "images.agent: an image reference is required" -}}
{{- end -}}
{{- if not $v.images.engine -}}
{{- fail "images.engine: an image reference is required" -}}
{{- end -}}
{{- if and (not $v.platformURL) (not $v.global.platform.domain) -}}
{{- fail "platformURL or global.platform.domain: the agent needs the platform's address" -}}
{{- end -}}
{{- if not $v.tokenSecret -}}
{{- fail "tokenSecret: the name of the registration token's Secret is required" -}}
{{- end -}}
{{- if lt (int $v.engine.cacheSizeGB) 1 -}}
{{- fail (printf "engine.cacheSizeGB: %v must be at least 1" $v.engine.cacheSizeGB) -}}
{{- end -}}
{{- if eq (include "runner.engineNamespace" .) .Release.Namespace -}}
{{- fail "engine.namespace: the build engine needs a namespace of its own, not the runner's" -}}
{{- end -}}
{{- end -}}

{{- define "runner.engineNamespace" -}}
{{- .Values.engine.namespace | default (printf "%s-engine" .Release.Namespace) -}}
{{- end -}}

{{- define "runner.platformURL" -}}
{{- .Values.platformURL | default (printf "https://%s/api" .Values.global.platform.domain) -}}
{{- end -}}

{{/* The port the engine serves builds on. */}}
{{- define "runner.enginePort" -}}{{ int .Values.engine.port }}{{- end -}}

{{/* Selector labels of the agent and of the engine (name and instance only). */}}
{{- define "runner.agentSelector" -}}
app.kubernetes.io/name: runner-agent
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}
{{- define "runner.engineSelector" -}}
app.kubernetes.io/name: runner-engine
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* Labels every object shares; the caller adds name and component. */}}
{{- define "runner.commonLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/part-of: onprem
app.kubernetes.io/version: {{ required "global.platform.version is required" .Values.global.platform.version | toString | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
onprem.dev/runner: {{ .Values.name | quote }}
{{- end -}}

{{/* Labels of the agent's objects (and of the runner namespace's own). */}}
{{- define "runner.agentLabels" -}}
app.kubernetes.io/name: runner-agent
app.kubernetes.io/component: runner
{{ include "runner.commonLabels" . }}
{{- end -}}

{{/* Labels of the engine's objects. */}}
{{- define "runner.engineLabels" -}}
app.kubernetes.io/name: runner-engine
app.kubernetes.io/component: build-engine
{{ include "runner.commonLabels" . }}
{{- end -}}

{{/*
Egress to the outside world on the allowed TCP ports (the platform's
ingress, Git servers, registries, the proxy). Argument: the root context and
extra ports, as dict "root" . "extra" (list ...).
*/}}
{{- define "runner.outsideEgress" -}}
- to:
    - ipBlock:
        cidr: 0.0.0.0/0
  ports:
    {{- $ports := list }}
    {{- range (concat .root.Values.networkPolicy.egressPorts .extra) }}
    {{- if not (has (int .) $ports) }}
    {{- $ports = append $ports (int .) }}
    - protocol: TCP
      port: {{ int . }}
    {{- end }}
    {{- end }}
{{- end -}}

{{/* DNS, to the cluster DNS pods only (as manifests/base/networkpolicy-dns.yaml). */}}
{{- define "runner.dnsEgress" -}}
- to:
    - namespaceSelector: {}
      podSelector:
        matchLabels:
          k8s-app: kube-dns
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end -}}
