{{/*
The mongodb chart's own helpers (charts/README.md is the values contract).
Names, labels, security contexts, the data volume and the rest every chart
shares are the library chart's (charts/common, "common.*").

High availability ("common.ha": global.availability is "high"): the chart
then runs ha.replicas members of one replica set, one per node, and a Job
that initiates the set and keeps its members those of the StatefulSet
(docs/availability.md).
*/}}

{{/*
Replicas. Without high availability this chart runs one standalone
server: several independent copies behind one Service would each hold a
part of the data, so any number above 1 is refused (0 is allowed, to stop
the server for maintenance). With it, ha.replicas members of one replica
set.
*/}}
{{- define "mongodb.replicas" -}}
{{- if include "common.ha" . -}}
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
{{- $name := include "common.name" . -}}
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
    {{- with include "common.imagePullSecrets" $ }}
    {{- . | nindent 4 }}
    {{- end }}
    securityContext:
      {{- include "common.podSecurityContext" (dict "uid" 999 "gid" 999 "fsGroup" 999) | nindent 6 }}
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
          {{- include "common.containerSecurityContext" (dict "uid" 999 "gid" 999) | nindent 10 }}
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
          name: {{ include "common.name" $ }}-replica-set
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
{{- $l := include "common.labels" . | fromYaml -}}
{{- $_ := set $l "app.kubernetes.io/name" (printf "%s-replica-set" (include "common.name" .)) -}}
{{- $_ := set $l "onprem.dev/client-mongodb" "true" -}}
{{- toYaml $l -}}
{{- end -}}
