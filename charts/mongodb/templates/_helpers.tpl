{{/*
Names, labels and security settings of the mongodb chart (see
charts/README.md, the values contract). Object names are fixed, never the
release name, so that other charts and the installer can refer to them.
*/}}

{{- define "mongodb.name" -}}mongodb{{- end -}}

{{/* Selector labels: name and instance only (selectors are immutable). */}}
{{- define "mongodb.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mongodb.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/*
Labels that never change from one platform version to the next. Used on
volumeClaimTemplates, which a StatefulSet does not let you change, and on
pod templates, so that an upgrade restarts a pod only when it changes.
*/}}
{{- define "mongodb.stableLabels" -}}
{{ include "mongodb.selectorLabels" . }}
app.kubernetes.io/component: database
app.kubernetes.io/part-of: onprem
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Labels of every object; pod templates of long-running pods take the stable ones. */}}
{{- define "mongodb.labels" -}}
{{ include "mongodb.stableLabels" . }}
app.kubernetes.io/version: {{ required "global.platform.version is required" .Values.global.platform.version | toString | quote }}
{{- end -}}

{{/* imagePullSecrets from global.imagePullSecrets (a list of Secret names). */}}
{{- define "mongodb.imagePullSecrets" -}}
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
{{- define "mongodb.podSecurityContext" -}}
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
{{- define "mongodb.containerSecurityContext" -}}
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
{{- define "mongodb.resources" -}}
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
the server for maintenance). With it, ha.replicas members of one replica
set.
*/}}
{{- define "mongodb.replicas" -}}
{{- if include "mongodb.ha" . -}}
{{- $r := int .Values.ha.replicas -}}
{{- if and (ne $r 0) (lt $r 3) -}}
{{- fail (printf "mongodb: ha.replicas is %d, but high availability needs 3 or more members, so that the members left after losing one are a majority that can elect a primary (0 stops them)" $r) -}}
{{- end -}}
{{- $r -}}
{{- else -}}
{{- $r := int .Values.replicas -}}
{{- if or (lt $r 0) (gt $r 1) -}}
{{- fail (printf "mongodb: replicas is %d, but without spec.availability high this chart runs a single standalone server (no replica set), so it must be 0 or 1" $r) -}}
{{- end -}}
{{- $r -}}
{{- end -}}
{{- end -}}

{{/*
High availability: global.availability is "high". The chart then runs
ha.replicas members of one replica set, one per node, and a Job that
initiates the set and keeps its members those of the StatefulSet
(docs/availability.md).
*/}}
{{- define "mongodb.ha" -}}
{{- if eq (toString .Values.global.availability) "high" -}}true{{- end -}}
{{- end -}}

{{/* The label that selects the members of the replica set. */}}
{{- define "mongodb.haLabels" -}}
onprem.dev/mongodb-cluster: {{ include "mongodb.name" . }}
{{- end -}}

{{/*
The replica set's name: global.databases.mongodb.replicaSet, which onprem
sets with high availability and hands the services too
(MONGODB_REPLICA_SET).
*/}}
{{- define "mongodb.replicaSet" -}}
{{- $rs := toString (dig "replicaSet" "" .Values.global.databases.mongodb) -}}
{{- if not $rs -}}
{{- fail "mongodb: global.databases.mongodb.replicaSet is required with global.availability high (onprem sets it)" -}}
{{- end -}}
{{- $rs -}}
{{- end -}}

{{/*
The members as the replica set's configuration names them, in the
StatefulSet's order: stable DNS names through the headless Service, so a
member's new pod (new address) keeps its place in the set. A JSON list of
host:port.
*/}}
{{- define "mongodb.members" -}}
{{- $name := include "mongodb.name" . -}}
{{- $out := list -}}
{{- range $i, $_ := until (int (include "mongodb.replicas" .)) -}}
{{- $out = append $out (printf "%s-%d.%s-headless.%s.svc:27017" $name $i $name $.Release.Namespace) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The Secret holding the members' shared key (keyfile). */}}
{{- define "mongodb.keyFileSecret" -}}
{{- .Values.ha.keyFileSecret | default "onprem-mongodb-keyfile" -}}
{{- end -}}

{{/*
storageClassName of the data volume: persistence.storageClass, else
global.storageClass, else left out (the cluster's default class). "-"
writes an explicit "" (no dynamic provisioning: bind a pre-created volume).
*/}}
{{- define "mongodb.storageClassName" -}}
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
{{- define "mongodb.dataClaim" -}}
- metadata:
    name: data
    labels:
      {{- include "mongodb.stableLabels" . | nindent 6 }}
  spec:
    accessModes:
      - ReadWriteOnce
    {{- with include "mongodb.storageClassName" . }}
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
{{- define "mongodb.commandArgs" -}}
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
{{- define "mongodb.bytes" -}}
{{- $q := toString . -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $num $q -}}
{{- $factors := dict "" 1.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 -}}
{{- if or (not $num) (not (hasKey $factors $unit)) -}}
{{- fail (printf "mongodb: cannot read the quantity %q (expected a number with an optional unit such as Mi, Gi, M or G)" $q) -}}
{{- end -}}
{{- printf "%.0f" (mulf (float64 $num) (get $factors $unit)) -}}
{{- end -}}

{{/*
The spec of the Job that initiates the replica set and keeps its members
(files/replica-set.js). Argument: dict with ctx, members (host:port list),
secret (the admin's Secret) and script.
*/}}
{{- define "mongodb.replicaSetJobSpec" -}}
{{- $ := .ctx -}}
# A failed attempt is retried in a new pod; the script is idempotent.
backoffLimit: 3
# No ttlSecondsAfterFinished: the installer reads the outcome of the Job.
template:
  metadata:
    labels:
      {{- include "mongodb.replicaSetJobLabels" $ | nindent 6 }}
    annotations:
      checksum/script: {{ .script | sha256sum }}
  spec:
    # Never: a failed attempt stays as a pod whose logs tell what went
    # wrong, and the Job starts a fresh pod (backoffLimit).
    restartPolicy: Never
    automountServiceAccountToken: false
    enableServiceLinks: false
    {{- with include "mongodb.imagePullSecrets" $ }}
    {{- . | nindent 4 }}
    {{- end }}
    securityContext:
      {{- include "mongodb.podSecurityContext" (dict "uid" 999 "gid" 999 "fsGroup" 999) | nindent 6 }}
    containers:
      - name: replica-set
        image: {{ required "images.mongodb is required" $.Values.images.mongodb | quote }}
        imagePullPolicy: IfNotPresent
        command:
          - mongosh
          - --nodb
          - --norc
          - --quiet
          - --file
          - /etc/mongodb-replica-set/replica-set.js
        env:
          - name: MONGODB_REPLICA_SET
            value: {{ include "mongodb.replicaSet" $ | quote }}
          - name: MONGODB_MEMBERS
            value: {{ join "," .members | quote }}
          # mongosh keeps its state under $HOME/.mongodb.
          - name: HOME
            value: /tmp
        resources:
          requests:
            cpu: 50m
            memory: 64Mi
          limits:
            memory: 256Mi
        securityContext:
          {{- include "mongodb.containerSecurityContext" (dict "uid" 999 "gid" 999) | nindent 10 }}
        volumeMounts:
          - name: script
            mountPath: /etc/mongodb-replica-set
            readOnly: true
          - name: script
            mountPath: /etc/mongosh.conf
            subPath: mongosh.conf
            readOnly: true
          - name: admin
            mountPath: /etc/mongodb-admin
            readOnly: true
          - name: tmp
            mountPath: /tmp
    volumes:
      - name: script
        configMap:
          name: {{ include "mongodb.name" $ }}-replica-set
      - name: admin
        secret:
          secretName: {{ .secret | quote }}
          # 0440 (written in decimal), readable by the fsGroup.
          defaultMode: 288
      - name: tmp
        emptyDir:
          sizeLimit: 64Mi
{{- end -}}

{{/*
Labels of the replica set Job and its pod: the chart's, but a name of its
own, so that the Service mongodb, the budget and the installer's lists of
members never take the Job's pod for a member; and the flow label that
lets it reach the members (NetworkPolicy onprem-mongodb-client-egress).
*/}}
{{- define "mongodb.replicaSetJobLabels" -}}
{{- $l := include "mongodb.labels" . | fromYaml -}}
{{- $_ := set $l "app.kubernetes.io/name" (printf "%s-replica-set" (include "mongodb.name" .)) -}}
{{- $_ := set $l "onprem.dev/client-mongodb" "true" -}}
{{- toYaml $l -}}
{{- end -}}
