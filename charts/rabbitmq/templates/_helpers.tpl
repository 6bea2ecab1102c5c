{{/*
The rabbitmq chart's own helpers (charts/README.md is the values contract).
Names, labels, security contexts, the data volume and the rest every chart
shares are the library chart's (charts/common, "common.*").

High availability ("common.ha": global.availability is "high"): the chart
then runs ha.replicas RabbitMQ nodes (3 by default) as one cluster, formed
through the Kubernetes API (the peer discovery plugin reads the headless
Service's endpoints), one node per node of the cluster, whose queues are
quorum queues (replicated by Raft on every node).
*/}}

{{/*
Replicas. Without high availability this chart runs one standalone
server: several independent copies behind one Service would each hold a
part of the data, so any number above 1 is refused (0 is allowed, to stop
the server for maintenance). With it, ha.replicas nodes of one cluster.
*/}}
{{- define "rabbitmq.replicas" -}}
{{- if include "common.ha" . -}}
{{- $r := int .Values.ha.replicas -}}
{{- if and (ne $r 0) (lt $r 3) -}}
{{- fail (printf "rabbitmq: ha.replicas is %d, but high availability needs 3 or more nodes, so that losing one leaves a majority of every quorum queue (0 stops the cluster)" $r) -}}
{{- end -}}
{{- $r -}}
{{- else -}}
{{- $r := int .Values.replicas -}}
{{- if or (lt $r 0) (gt $r 1) -}}
{{- fail (printf "rabbitmq: replicas is %d, but without spec.availability high this chart runs a single standalone server (no clustering), so it must be 0 or 1" $r) -}}
{{- end -}}
{{- $r -}}
{{- end -}}
{{- end -}}
