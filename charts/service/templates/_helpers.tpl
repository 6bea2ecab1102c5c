{{/*
Checks the values once, so that a mistake fails the render with the name of
the key instead of producing an object the API server or the service rejects.
*/}}
{{- define "service.validate" -}}
{{- $v := .Values -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$" (toString $v.name)) -}}
{{- fail (printf "name: %q must be a DNS label (it names the Service and the per-service Secrets)" (toString $v.name)) -}}
{{- end -}}
{{- if not (has (toString $v.role) (list "api" "ui" "worker")) -}}
{{- fail (printf "role: %q must be one of api, ui, worker" (toString $v.role)) -}}
{{- end -}}
{{- if not $v.images.service -}}
{{- fail "images.service: an image reference is required" -}}
{{- end -}}
{{- $port := int $v.port -}}
{{- if or (lt $port 1) (gt $port 65535) -}}
{{- fail (printf "port: %v is not a TCP port" $v.port) -}}
{{- end -}}
{{- if lt (int $v.replicas) 0 -}}
{{- fail (printf "replicas: %v must not be negative" $v.replicas) -}}
{{- end -}}
{{- range $v.routes -}}
{{- if not (hasPrefix "/" (toString .)) -}}
{{- fail (printf "routes: %q must start with /" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- if and $v.routes (eq (toString $v.role) "worker") -}}
{{- fail (printf "routes: %v given to a worker; a worker takes no routed traffic (set role: api or ui, or drop the routes)" $v.routes) -}}
{{- end -}}
{{- if $v.routes -}}
{{- if not $v.global.platform.domain -}}
{{- fail "global.platform.domain: required when routes are set" -}}
{{- end -}}
{{- if and $v.global.gatewayAPI.enabled (not $v.global.gatewayAPI.gatewayName) -}}
{{- fail "global.gatewayAPI.gatewayName: required when global.gatewayAPI.enabled is true" -}}
{{- end -}}
{{- end -}}
{{- range $db := list "mongodb" "postgresql" "redis" "rabbitmq" -}}
{{- if index $v.uses $db -}}
{{- $conn := index $v.global.databases $db -}}
{{- if not $conn.secretName -}}
{{- fail (printf "global.databases.%s.secretName: required when uses.%s is true" $db $db) -}}
{{- end -}}
{{- if and (not $conn.external) (not $conn.host) -}}
{{- fail (printf "global.databases.%s.host: required when the database is in the cluster" $db) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $reserved := list "ONPREM_SERVICE" "ONPREM_VERSION" "PORT" "SIGNING_KEY" "ENCRYPTION_KEY" -}}
{{- range $db := list "MONGODB" "POSTGRESQL" "REDIS" "RABBITMQ" -}}
{{- range $k := list "HOST" "PORT" "DATABASE" "USERNAME" "PASSWORD" "REPLICA_SET" -}}
{{- $reserved = append $reserved (printf "%s_%s" $db $k) -}}
{{- end -}}
{{- end -}}
{{- range $k, $_ := $v.env -}}
{{- if has $k $reserved -}}
{{- fail (printf "env.%s: set by the chart from uses and global.databases; it cannot be overridden" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: only name and instance, so that they never change. */}}
{{- define "service.selectorLabels" -}}
{{- toYaml (dict "app.kubernetes.io/name" (toString .Values.name) "app.kubernetes.io/instance" .Release.Name) -}}
{{- end -}}

{{/* Labels of every object of the chart. */}}
{{- define "service.labels" -}}
{{- $l := dict
  "app.kubernetes.io/name" (toString .Values.name)
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/component" (toString .Values.role)
  "app.kubernetes.io/part-of" "onprem"
  "app.kubernetes.io/version" (toString .Values.global.platform.version)
  "app.kubernetes.io/managed-by" .Release.Service
-}}
{{- toYaml $l -}}
{{- end -}}

{{/*
Labels of the Deployment and its pod template: the common labels plus the
flow labels that the NetworkPolicies of manifests/ select on. An unused flow
leaves its label out rather than setting "false": the policies and the
hardening overlay match on "true" or on the label's absence.
*/}}
{{- define "service.workloadLabels" -}}
{{- $l := include "service.labels" . | fromYaml -}}
{{- range $db := list "mongodb" "postgresql" "redis" "rabbitmq" -}}
{{- if index $.Values.uses $db -}}
{{- $_ := set $l (printf "onprem.dev/client-%s" $db) "true" -}}
{{- end -}}
{{- end -}}
{{- if .Values.uses.kubeAPI -}}
{{- $_ := set $l "onprem.dev/kube-api" "true" -}}
{{- end -}}
{{- if .Values.routes -}}
{{- $_ := set $l "onprem.dev/ingress" "true" -}}
{{- end -}}
{{- toYaml $l -}}
{{- end -}}

{{/* One environment variable read from a Secret key. */}}
{{- define "service.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret | quote }}
      key: {{ .key | quote }}
{{- end -}}

{{/* An environment variable from a Secret's key that may be absent. */}}
{{- define "service.optionalSecretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret | quote }}
      key: {{ .key | quote }}
      optional: true
{{- end -}}

{{/*
<DB>_HOST and <DB>_PORT. In the cluster they are values; for an external
database they come from the operator's connection Secret, which is then the
one place the address lives (the contract forbids taking it from values).
*/}}
{{- define "service.endpointEnv" -}}
{{- $conn := index .root.Values.global.databases .db -}}
{{- $prefix := upper .db -}}
{{- if $conn.external -}}
{{ include "service.secretEnv" (dict "name" (printf "%s_HOST" $prefix) "secret" $conn.secretName "key" "host") }}
{{ include "service.secretEnv" (dict "name" (printf "%s_PORT" $prefix) "secret" $conn.secretName "key" "port") }}
{{- if eq .db "mongodb" }}
{{- /* An external replica set: its name in the Secret's key replicaSet,
the host a seed member. */}}
{{ include "service.optionalSecretEnv" (dict "name" "MONGODB_REPLICA_SET" "secret" $conn.secretName "key" "replicaSet") }}
{{- end }}
{{- else -}}
- name: {{ $prefix }}_HOST
  value: {{ $conn.host | toString | quote }}
- name: {{ $prefix }}_PORT
  value: {{ $conn.port | int | toString | quote }}
{{- with $conn.replicaSet }}
{{- /* A replica set (MongoDB with high availability): the client finds
its members and primary from the host, a seed, and checks the set's name. */}}
- name: {{ $prefix }}_REPLICA_SET
  value: {{ . | toString | quote }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
<DB>_DATABASE, <DB>_USERNAME, <DB>_PASSWORD from the service's own Secret
(onprem-<service>-<db>), which db-provision created the database and user
from, whether the server is in the cluster or external.
*/}}
{{- define "service.ownDatabaseEnv" -}}
{{- $prefix := upper .db -}}
{{- $secret := printf "onprem-%s-%s" .root.Values.name .db -}}
{{ include "service.secretEnv" (dict "name" (printf "%s_DATABASE" $prefix) "secret" $secret "key" "database") }}
{{ include "service.secretEnv" (dict "name" (printf "%s_USERNAME" $prefix) "secret" $secret "key" "username") }}
{{ include "service.secretEnv" (dict "name" (printf "%s_PASSWORD" $prefix) "secret" $secret "key" "password") }}
{{- end -}}
