{{/*
The redis chart's own helpers (charts/README.md is the values contract).
Names, labels, security contexts, the data volume and the rest every chart
shares are the library chart's (charts/common, "common.*").

High availability ("common.ha": global.availability is "high"): the chart
then runs ha.replicas members (3 by default), one per node of the cluster:
a master and replicas of it, each with a Sentinel beside it that promotes a
replica when the master is lost, and a keeper that points the Service redis
at the master (docs/availability.md). "common.haLabels" selects them.
*/}}

{{/*
Replicas. Without high availability this chart runs one standalone
server: several independent copies behind one Service would each hold a
part of the data, so any number above 1 is refused (0 is allowed, to stop
the server for maintenance). With it, ha.replicas members: one master and
its replicas, with Sentinel.
*/}}
{{- define "redis.replicas" -}}
{{- if include "common.ha" . -}}
{{- $r := int .Values.ha.replicas -}}
{{- if and (ne $r 0) (lt $r 3) -}}
{{- fail (printf "redis: ha.replicas is %d, but high availability needs 3 or more members, so that the Sentinels left after losing one are a majority that can elect a new master (0 stops them)" $r) -}}
{{- end -}}
{{- $r -}}
{{- else -}}
{{- $r := int .Values.replicas -}}
{{- if or (lt $r 0) (gt $r 1) -}}
{{- fail (printf "redis: replicas is %d, but without spec.availability high this chart runs a single standalone server (no replication), so it must be 0 or 1" $r) -}}
{{- end -}}
{{- $r -}}
{{- end -}}
{{- end -}}
