package config

// Validation of how the platform is reached, where its images come from and
// where its data lives.

import (
	"fmt"
	"net"
)

func (v *validator) tls(s *Spec) {
	const path = "spec.tls.secretName"
	switch s.TLS.Mode {
	case TLSModeSecret:
		if s.TLS.SecretName == "" {
			v.required(path, "with spec.tls.mode secret, the name of a kubernetes.io/tls Secret in namespace "+s.Namespace)
		} else {
			v.check(path, checkDNSSubdomain(s.TLS.SecretName), "")
		}
	case TLSModeSelfSigned:
		if s.TLS.SecretName != "" {
			v.c.add(path, "set spec.tls.mode: secret to use your own certificate",
				"must be empty with spec.tls.mode selfSigned (onprem generates the certificate)")
		}
	}
}

// MaxCertificateAgeDays is the largest spec.rotation.certificateMaxAgeDays:
// a serving certificate is valid 825 days, and is renewed 30 days before.
const MaxCertificateAgeDays = 790

func (v *validator) rotation(s *Spec) {
	const path = "spec.rotation.certificateMaxAgeDays"
	days := s.Rotation.CertificateMaxAgeDays
	// With spec.tls.mode secret it does nothing: onprem never changes the
	// operator's own certificate.
	if days < 0 || days > MaxCertificateAgeDays {
		v.c.add(path, "e.g. 365 renews the certificate once a year; 0 never renews it by itself",
			"%d: give the age in days after which 'onprem install' renews the certificate, 1 to %d", days, MaxCertificateAgeDays)
	}
	if days := s.Rotation.CredentialsMaxAgeDays; days < 0 || days > MaxCredentialsAgeDays {
		v.c.add("spec.rotation.credentialsMaxAgeDays", "e.g. 90 rotates the services' database logins every 90 days; 0 never rotates them by itself",
			"%d: give the age in days after which 'onprem install' rotates a service's database login, 1 to %d", days, MaxCredentialsAgeDays)
	}
	if days := s.Rotation.KeysMaxAgeDays; days < 0 || days > MaxCredentialsAgeDays {
		v.c.add("spec.rotation.keysMaxAgeDays", "e.g. 180 rotates the signing and encryption keys twice a year; 0 never rotates them by itself",
			"%d: give the age in days after which 'onprem install' rotates the signing and encryption keys, 1 to %d", days, MaxCredentialsAgeDays)
	}
}

// MaxCredentialsAgeDays is the largest spec.rotation.credentialsMaxAgeDays
// and keysMaxAgeDays.
const MaxCredentialsAgeDays = 3650

func (v *validator) ingress(s *Spec) {
	in := s.Ingress
	switch in.Mode {
	case IngressModeExisting:
		if in.ClassName == "" {
			v.required("spec.ingress.className", "with spec.ingress.mode existing, the IngressClass of your ingress controller ('kubectl get ingressclass' lists them)")
		}
		if in.ServiceType != "" {
			v.c.add("spec.ingress.serviceType", "", "only with spec.ingress.mode install (onprem installs no controller Service with mode existing): remove it")
		}
	}
	if in.ClassName != "" {
		v.check("spec.ingress.className", checkDNSSubdomain(in.ClassName), "")
	}

	gw := in.GatewayAPI
	const gwPath = "spec.ingress.gatewayAPI"
	if !gw.Enabled {
		for _, f := range []struct{ name, value string }{
			{"gatewayName", gw.GatewayName},
			{"gatewayNamespace", gw.GatewayNamespace},
			{"sectionName", gw.SectionName},
		} {
			if f.value != "" {
				v.c.add(gwPath+"."+f.name, "", "set but %s.enabled is not true: set enabled: true or remove it", gwPath)
			}
		}
		return
	}
	if gw.GatewayName == "" {
		v.required(gwPath+".gatewayName", "with gatewayAPI enabled, the name of the Gateway the routes attach to ('kubectl get gateways -A' lists them)")
	} else {
		v.check(gwPath+".gatewayName", checkDNSSubdomain(gw.GatewayName), "")
	}
	// A namespace inherited from spec.namespace is checked there.
	if gw.GatewayNamespace != "" && gw.GatewayNamespace != s.Namespace {
		v.check(gwPath+".gatewayNamespace", checkDNSLabel(gw.GatewayNamespace), "")
	}
	if gw.SectionName != "" {
		v.check(gwPath+".sectionName", checkDNSSubdomain(gw.SectionName), "")
	}
}

func (v *validator) images(s *Spec) {
	if s.Images.Platform != "" {
		msg, hint := checkImagePrefix(s.Images.Platform)
		v.check("spec.images.platform", msg, hint)
	}
}

func (v *validator) registry(s *Spec) {
	r := s.Registry
	const path = "spec.registry"
	if r.Host == "" {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"pathPrefix", r.PathPrefix != ""},
			{"pullSecret", r.PullSecret != ""},
			{"insecure", r.Insecure},
			{"requireSignatures", r.RequireSignatures},
		} {
			if f.set {
				v.c.add(path+"."+f.name, "", "only with %s.host: set the registry host too, or remove it", path)
			}
		}
		return
	}
	msg, hint := checkHostPort(r.Host)
	v.check(path+".host", msg, hint)
	if r.PathPrefix != "" {
		v.check(path+".pathPrefix", checkRepoPath(r.PathPrefix), "")
	}
	if r.PullSecret != "" {
		v.check(path+".pullSecret", checkDNSSubdomain(r.PullSecret), "")
	}
}

func (v *validator) storage(s *Spec) {
	if s.Storage.ClassName != "" {
		v.check("spec.storage.className", checkDNSSubdomain(s.Storage.ClassName), "")
	}
}

func (v *validator) databases(s *Spec) {
	for _, db := range s.Databases.All() {
		path := "spec.databases." + db.Name
		switch db.Mode {
		case DatabaseModeExternal:
			if db.External.SecretName == "" {
				v.required(path+".external.secretName", "with mode external, the Secret in namespace "+s.Namespace+" holding host, port, username and password")
			} else {
				v.check(path+".external.secretName", checkDNSSubdomain(db.External.SecretName), "")
			}
			if db.Persistence != (Persistence{}) {
				v.c.add(path+".persistence", "", "must be empty with mode external (onprem runs no %s to give a volume to): remove it", db.Name)
			}
			for i, c := range db.External.CIDRs {
				if _, _, err := net.ParseCIDR(c); err != nil {
					v.c.add(fmt.Sprintf("%s.external.cidrs[%d]", path, i), "an address and prefix length, e.g. 10.20.0.15/32 for one server or 10.20.0.0/24 for a subnet",
						"%q is not a CIDR", c)
				}
			}
			if p := db.External.Port; p != 0 && (p < 1 || p > 65535) {
				v.c.add(path+".external.port", "the port in the Secret "+db.External.SecretName+", e.g. 5432", "%d is not a port (1 to 65535)", p)
			}
		case DatabaseModeInternal:
			if !db.External.IsZero() {
				v.c.add(path+".external", "set mode: external to use your own "+db.Name,
					"must be empty with mode internal (onprem runs %s in the cluster)", db.Name)
			}
			if db.Persistence.Size != "" {
				msg, hint := checkQuantity(db.Persistence.Size)
				v.check(path+".persistence.size", msg, hint)
			}
			// A class inherited from spec.storage.className is checked there.
			if sc := db.Persistence.StorageClass; sc != "" && sc != s.Storage.ClassName {
				v.check(path+".persistence.storageClass", checkDNSSubdomain(db.Persistence.StorageClass), "")
			}
		}
	}
}
