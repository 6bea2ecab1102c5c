{{/*
The services, checked, as JSON: {"mongodb": [names], "postgresql": [names]}.
A name must be a DNS label: it is part of Secret names and file paths.
*/}}
{{- define "dbprovision.services" -}}
{{- $mongodb := list -}}
{{- $postgresql := list -}}
{{- $seen := dict -}}
{{- range $i, $s := .Values.services | default list -}}
{{- if not (kindIs "map" $s) -}}
{{- fail (printf "db-provision: services[%d] must be a map with name, mongodb and postgresql" $i) -}}
{{- end -}}
{{- $name := toString (get $s "name" | default "") -}}
{{- if or (gt (len $name) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name)) -}}
{{- fail (printf "db-provision: services[%d].name %q is not a DNS label (lower-case letters, digits and '-', at most 63)" $i $name) -}}
{{- end -}}
{{- if hasKey $seen $name -}}
{{- fail (printf "db-provision: service %q is listed twice" $name) -}}
{{- end -}}
{{- $_ := set $seen $name true -}}
{{- if get $s "mongodb" }}{{ $mongodb = append $mongodb $name }}{{ end -}}
{{- if get $s "postgresql" }}{{ $postgresql = append $postgresql $name }}{{ end -}}
{{- end -}}
{{- toJson (dict "mongodb" $mongodb "postgresql" $postgresql) -}}
{{- end -}}

{{/* The ConfigMap's data: the scripts and the lists of services. */}}
{{- define "dbprovision.configData" -}}
{{- $svc := include "dbprovision.services" . | fromJson -}}
{{- if $svc.mongodb }}
mongodb-services: |
  {{- range $svc.mongodb }}
  {{ . }}
  {{- end }}
mongodb-provision.js: |
  {{- .Files.Get "files/mongodb-provision.js" | trimSuffix "\n" | nindent 2 }}
mongosh.conf: |
  {{- .Files.Get "files/mongosh.conf" | trimSuffix "\n" | nindent 2 }}
{{- end }}
{{- if $svc.postgresql }}
postgresql-services: |
  {{- range $svc.postgresql }}
  {{ . }}
  {{- end }}
postgresql-provision.sh: |
  {{- .Files.Get "files/postgresql-provision.sh" | trimSuffix "\n" | nindent 2 }}
postgresql-provision.sql: |
  {{- .Files.Get "files/postgresql-provision.sql" | trimSuffix "\n" | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Environment of a container: where its database is and the admin's
credentials. Argument: dict with ctx (root context), db (mongodb or
postgresql) and the variable names host, port, tls, username, password.
For an external database, host, port and (optional) tls come from the
operator's Secret too.
*/}}
{{- define "dbprovision.databaseEnv" -}}
{{- $d := index .ctx.Values.global.databases .db -}}
{{- $secret := required (printf "global.databases.%s.secretName is required" .db) $d.secretName -}}
{{- if $d.external }}
- name: {{ .host }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret | quote }}
      key: host
- name: {{ .port }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret | quote }}
      key: port
- name: {{ .tls }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret | quote }}
      key: tls
      optional: true
{{- if eq .db "mongodb" }}
# An external replica set: its name in the Secret (key replicaSet).
- name: MONGODB_REPLICA_SET
  valueFrom:
    secretKeyRef:
      name: {{ $secret | quote }}
      key: replicaSet
      optional: true
{{- end }}
{{- else }}
- name: {{ .host }}
  value: {{ required (printf "global.databases.%s.host is required" .db) $d.host | toString | quote }}
- name: {{ .port }}
  value: {{ required (printf "global.databases.%s.port is required" .db) $d.port | toString | quote }}
{{- with $d.replicaSet }}
# MongoDB's replica set (high availability): the script finds the primary.
- name: MONGODB_REPLICA_SET
  value: {{ . | toString | quote }}
{{- end }}
{{- end }}
- name: {{ .username }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret | quote }}
      key: username
- name: {{ .password }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret | quote }}
      key: password
{{- end -}}

{{/*
A projected volume of the services' Secrets onprem-<service>-<db>: the
keys username, password and database of each at <service>/<key>.
Argument: dict with db and services (names).
*/}}
{{- define "dbprovision.credentialsVolume" -}}
- name: {{ .db }}-credentials
  projected:
    # 0440, root-owned files readable by the pod's fsGroup (in decimal: YAML
    # 1.1 and 1.2 read 0440 differently).
    defaultMode: 288
    sources:
      {{- range .services }}
      - secret:
          name: {{ printf "onprem-%s-%s" . $.db | quote }}
          items:
            - key: username
              path: {{ . }}/username
            - key: password
              path: {{ . }}/password
            - key: database
              path: {{ . }}/database
      {{- if eq $.db "postgresql" }}
      # The owner, when a rotation made the login another role: absent
      # until then, hence optional.
      - secret:
          name: {{ printf "onprem-%s-%s" . $.db | quote }}
          optional: true
          items:
            - key: owner
              path: {{ . }}/owner
      {{- end }}
      {{- end }}
{{- end -}}

{{/*
The Job's spec. Its hash names the Job: a Job's pod template cannot be
changed, so any change to it (services, images, scripts, settings, the
platform version) makes a new Job, and the same spec keeps the same Job.
*/}}
{{- define "dbprovision.jobSpec" -}}
{{- $svc := include "dbprovision.services" . | fromJson -}}
# A failed attempt is retried in a new pod; the scripts are idempotent.
backoffLimit: 6
# No ttlSecondsAfterFinished: the installer reads the outcome of the Job.
template:
  metadata:
    labels:
      {{- include "common.labels" . | nindent 6 }}
      {{- include "dbprovision.flowLabels" . | trim | nindent 6 }}
    annotations:
      checksum/scripts: {{ include "dbprovision.configData" . | sha256sum }}
  spec:
    # Never: a failed attempt stays as a pod whose logs tell what went wrong,
    # and the Job starts a fresh pod (backoffLimit). With OnFailure the
    # kubelet would restart the container in place and keep only the last
    # attempt's logs.
    restartPolicy: Never
    automountServiceAccountToken: false
    enableServiceLinks: false
    {{- with include "common.imagePullSecrets" . }}
    {{- . | nindent 4 }}
    {{- end }}
    securityContext:
      {{- include "common.podSecurityContext" (dict "uid" 999 "gid" 999 "fsGroup" 999) | nindent 6 }}
    containers:
      {{- if $svc.mongodb }}
      - name: mongodb
        image: {{ required "images.mongodb is required" .Values.images.mongodb | quote }}
        imagePullPolicy: IfNotPresent
        command:
          - mongosh
          - --nodb
          - --norc
          - --quiet
          - --file
          - /etc/onprem/db-provision/mongodb-provision.js
        env:
          # mongosh keeps its state under $HOME/.mongodb.
          - name: HOME
            value: /tmp
          {{- include "dbprovision.databaseEnv" (dict "ctx" . "db" "mongodb" "host" "MONGODB_HOST" "port" "MONGODB_PORT" "tls" "MONGODB_TLS" "username" "MONGODB_ADMIN_USERNAME" "password" "MONGODB_ADMIN_PASSWORD") | trim | nindent 10 }}
        {{- include "common.resources" . | nindent 8 }}
        securityContext:
          {{- include "common.containerSecurityContext" (dict "uid" 999 "gid" 999) | nindent 10 }}
        volumeMounts:
          - name: scripts
            mountPath: /etc/onprem/db-provision
            readOnly: true
          - name: scripts
            mountPath: /etc/mongosh.conf
            subPath: mongosh.conf
            readOnly: true
          - name: mongodb-credentials
            mountPath: /var/run/onprem/mongodb
            readOnly: true
          - name: tmp
            mountPath: /tmp
      {{- end }}
      {{- if $svc.postgresql }}
      - name: postgresql
        image: {{ required "images.postgresql is required" .Values.images.postgresql | quote }}
        imagePullPolicy: IfNotPresent
        command:
          - sh
          - /etc/onprem/db-provision/postgresql-provision.sh
        env:
          - name: HOME
            value: /tmp
          - name: PGDATABASE
            value: postgres
          - name: PGCONNECT_TIMEOUT
            value: "10"
          - name: PGAPPNAME
            value: onprem-db-provision
          {{- include "dbprovision.databaseEnv" (dict "ctx" . "db" "postgresql" "host" "PGHOST" "port" "PGPORT" "tls" "POSTGRESQL_TLS" "username" "PGUSER" "password" "PGPASSWORD") | trim | nindent 10 }}
        {{- include "common.resources" . | nindent 8 }}
        securityContext:
          {{- include "common.containerSecurityContext" (dict "uid" 999 "gid" 999) | nindent 10 }}
        volumeMounts:
          - name: scripts
            mountPath: /etc/onprem/db-provision
            readOnly: true
          - name: postgresql-credentials
            mountPath: /var/run/onprem/postgresql
            readOnly: true
          - name: tmp
            mountPath: /tmp
      {{- end }}
    volumes:
      - name: scripts
        configMap:
          name: {{ include "common.name" . }}
      - name: tmp
        emptyDir:
          sizeLimit: 64Mi
      {{- if $svc.mongodb }}
      {{- include "dbprovision.credentialsVolume" (dict "db" "mongodb" "services" $svc.mongodb) | nindent 6 }}
      {{- end }}
      {{- if $svc.postgresql }}
      {{- include "dbprovision.credentialsVolume" (dict "db" "postgresql" "services" $svc.postgresql) | nindent 6 }}
      {{- end }}
{{- end -}}

{{/* Flow labels: the pod connects to the databases it provisions. */}}
{{- define "dbprovision.flowLabels" -}}
{{- $svc := include "dbprovision.services" . | fromJson -}}
{{- if $svc.mongodb }}
onprem.dev/client-mongodb: "true"
{{- end }}
{{- if $svc.postgresql }}
onprem.dev/client-postgresql: "true"
{{- end }}
{{- end -}}
