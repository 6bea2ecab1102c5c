{{/*
What every pod and container of the charts carries: image pull Secrets,
the restricted security contexts, resources, the command and args.
*/}}

{{/* imagePullSecrets from global.imagePullSecrets (a list of Secret names). Argument: the root context. */}}
{{- define "common.imagePullSecrets" -}}
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
{{- define "common.podSecurityContext" -}}
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
{{- define "common.containerSecurityContext" -}}
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

{{/* resources of a container, straight from values. Argument: the root context. */}}
{{- define "common.resources" -}}
{{- with .Values.resources -}}
resources:
  {{- toYaml . | nindent 2 }}
{{- else -}}
resources: {}
{{- end -}}
{{- end -}}

{{/*
The container's command and args: command and args from values when set;
with a command override and no args, no args (the defaults belong to the
default program). Argument: dict with ctx (the root context) and args (the
default args, a list).
*/}}
{{- define "common.commandArgs" -}}
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
topologySpreadConstraints that spread a workload's pods over nodes, and
over zones where the nodes carry topology.kubernetes.io/zone. With high
availability the spread over nodes is a rule (DoNotSchedule): the promise
is that losing one node leaves every component serving, so two replicas
on one node are refused rather than started (preflight asks for three
schedulable nodes; tainted and cordoned nodes do not count,
nodeTaintsPolicy Honor, so a drain still finds room). Otherwise it is a
preference (ScheduleAnyway): a cluster may have fewer schedulable nodes
than replicas, and a service that does not start is worse than two
replicas on one node. The zone spread stays a preference either way (a
cluster may have no zones). pod-template-hash keeps a rollout's new pods
from being balanced against the old ones. Argument: dict with ctx (the
root context) and labels (the pods' selector labels, YAML).
*/}}
{{- define "common.spreadOverNodes" -}}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: {{ if include "common.ha" .ctx }}DoNotSchedule{{ else }}ScheduleAnyway{{ end }}
  nodeTaintsPolicy: Honor
  labelSelector:
    matchLabels:
      {{- .labels | nindent 6 }}
  matchLabelKeys:
    - pod-template-hash
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
  nodeTaintsPolicy: Honor
  labelSelector:
    matchLabels:
      {{- .labels | nindent 6 }}
  matchLabelKeys:
    - pod-template-hash
{{- end -}}
