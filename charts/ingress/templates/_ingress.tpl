{{/* IngressClass created and served. */}}
{{- define "ingress.className" -}}
{{- required "className is required" .Values.className -}}
{{- end -}}

{{/* serviceType, checked. */}}
{{- define "ingress.serviceType" -}}
{{- $t := .Values.serviceType | default "LoadBalancer" -}}
{{- if not (has $t (list "LoadBalancer" "NodePort" "ClusterIP")) -}}
{{- fail (printf "ingress: serviceType is %q; valid: LoadBalancer, NodePort, ClusterIP" $t) -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{/* The data of the ConfigMap Traefik's file provider reads (configmap.yaml);
its checksum restarts the controller when it changes. */}}
{{- define "ingress.dynamicConfig" -}}
dynamic.yaml: |
  http:
    middlewares:
      retry-refused:
        retry:
          attempts: 4
          initialInterval: 200ms
{{- end -}}
