package doctor

import (
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/config"
)

// ingressAddressExpected says whether the platform's Ingresses should
// carry a load-balancer address, judged by the configuration: only when
// onprem installs the ingress controller behind a LoadBalancer Service
// (spec.ingress.serviceType, the default) whose pods take no host port,
// or when the controller is the operator's own (spec.ingress.mode
// existing: onprem cannot tell). With a NodePort or ClusterIP Service, or
// host ports, no address is published and none is needed. Without a
// recorded configuration, the controller's Service says.
func ingressAddressExpected(in *Input) bool {
	ns := in.S.Meta.Namespace
	o := in.S.Objects(ns)
	for _, p := range o.Pods {
		if in.component(ns, p.Name) != "ingress" {
			continue
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if port.HostPort > 0 {
					return false
				}
			}
		}
	}
	mode, serviceType, ok := ingressConfig(in.S.Config)
	if !ok {
		for _, s := range o.Services {
			if componentOf(s.Labels, "") == "ingress" {
				serviceType = string(s.Spec.Type)
				if serviceType == config.ServiceTypeLoadBalancer {
					break
				}
			}
		}
		if serviceType == "" {
			return true
		}
		mode = config.IngressModeInstall
	}
	return mode == config.IngressModeExisting || serviceType == config.ServiceTypeLoadBalancer
}

// ingressConfig reads spec.ingress.mode and serviceType of the recorded
// configuration, defaulted (ok false: none recorded, or unreadable).
func ingressConfig(data []byte) (mode, serviceType string, ok bool) {
	if len(data) == 0 {
		return "", "", false
	}
	var c struct {
		Spec struct {
			Ingress struct {
				Mode        string `json:"mode"`
				ServiceType string `json:"serviceType"`
			} `json:"ingress"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		return "", "", false
	}
	mode, serviceType = c.Spec.Ingress.Mode, c.Spec.Ingress.ServiceType
	if mode == "" {
		mode = config.DefaultIngressMode
	}
	if serviceType == "" {
		serviceType = config.DefaultServiceType
	}
	return mode, serviceType, true
}
