{{/*
mongod's default arguments. With high availability, the replica set's name
and the members' shared key (copied to a file only mongod's user reads:
mongod refuses a key file others can read). With a memory limit, the WiredTiger cache is
sized from the limit the way mongod sizes it from a machine's memory (half
of it less 1 GiB, at least 0.25 GB): mongod may not see the container's
limit and would size its cache from the node's memory, then be killed.
*/}}
{{- define "mongodb.defaultArgs" -}}
{{- $args := list "mongod" "--bind_ip_all" "--auth" -}}
{{- if include "common.ha" . -}}
{{- $args = concat $args (list "--replSet" (include "mongodb.replicaSet" .) "--keyFile" "/etc/mongodb-keyfile/keyfile") -}}
{{- end -}}
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) -}}
{{- if $limit -}}
{{- $bytes := include "common.bytes" (dict "ctx" . "quantity" $limit) | float64 -}}
{{- $gb := divf (subf (mulf $bytes 0.5) 536870912.0) 1073741824.0 -}}
{{- if lt $gb 0.25 }}{{ $gb = 0.25 }}{{ end -}}
{{- $args = concat $args (list "--wiredTigerCacheSizeGB" (printf "%.2f" $gb)) -}}
{{- end -}}
{{- toJson $args -}}
{{- end -}}
