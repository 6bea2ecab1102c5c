package preflight

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
)

const ingressID = "ingress"

// ingressCheck: the IngressClass (existing, or ours to install without a
// clash), the controller's node ports, and the TLS certificate.
func ingressCheck() Check {
	return Check{
		ID:       ingressID,
		Title:    "the IngressClass, the controller's node ports and the TLS certificate for the domain are usable",
		Severity: Blocking,
		Run:      runIngress,
	}
}

// findings collects problems of several parts of one check.
type findings struct {
	result  Result
	msgs    []string
	rems    []string
	passes  []string
	details []string
}

func (f *findings) problem(r Result, msg, rem string) {
	if f.result != Fail {
		f.result = r
	}
	f.msgs = append(f.msgs, msg)
	if rem != "" {
		f.rems = append(f.rems, rem)
	}
}

func (f *findings) ok(format string, a ...any) {
	f.passes = append(f.passes, fmt.Sprintf(format, a...))
}

func (f *findings) outcome() Outcome {
	if f.result == "" {
		return Outcome{Result: Pass, Message: strings.Join(f.passes, "; "), Details: f.details}
	}
	return Outcome{Result: f.result, Message: strings.Join(f.msgs, "; "), Remediation: strings.Join(f.rems, "; "),
		Details: append(f.passes, f.details...)}
}

// ingressComponent is the name of the rendered component that installs the
// ingress controller ("" in mode existing).
func ingressComponent(env *Env) string {
	if env.Release != nil {
		for _, c := range env.Release.Components {
			if c.Group == release.GroupIngress && env.Rendered.Component(c.Name) != nil {
				return c.Name
			}
		}
	}
	for _, c := range env.Rendered.Components {
		if c.Group == release.GroupIngress {
			return c.Name
		}
	}
	return ""
}

func runIngress(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Blocking, "cluster", "rendered", "installation"); !ok {
		return out
	}
	spec := env.Installation.Spec
	ns := platformNamespace(env)
	var f findings
	f.ok("domain %s is a valid DNS name (checked with the configuration)", spec.Domain)

	if err := checkIngressClass(ctx, env, &f); err != nil {
		return cannotRun(Blocking, ingressID, "read IngressClasses", err)
	}
	if spec.Ingress.Mode != config.IngressModeExisting && spec.Ingress.ServiceType == config.ServiceTypeNodePort {
		if err := checkNodePorts(ctx, env, &f); err != nil {
			return cannotRun(Blocking, ingressID, "list Services in all namespaces", err)
		}
	}
	if err := checkTLS(ctx, env, ns, &f); err != nil {
		return cannotRun(Blocking, ingressID, "read the TLS Secret in namespace "+ns, err)
	}
	return f.outcome()
}

func checkIngressClass(ctx context.Context, env *Env, f *findings) error {
	spec := env.Installation.Spec
	class := spec.Ingress.ClassName
	ns := platformNamespace(env)
	ic, err := env.Cluster.Client.NetworkingV1().IngressClasses().Get(ctx, class, metav1.GetOptions{})
	notFound := apierrors.IsNotFound(err)
	if err != nil && !notFound {
		return err
	}
	if spec.Ingress.Mode == config.IngressModeExisting {
		if notFound {
			var have []string
			if l, err := env.Cluster.Client.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{}); err == nil {
				for _, c := range l.Items {
					have = append(have, c.Name)
				}
			}
			sort.Strings(have)
			msg := fmt.Sprintf("IngressClass %s (spec.ingress.className, mode existing) does not exist", class)
			if len(have) > 0 {
				msg += "; the cluster has: " + strings.Join(have, ", ")
			} else {
				msg += "; the cluster has no IngressClass"
			}
			f.problem(Fail, msg, "set spec.ingress.className to an IngressClass the cluster has, install your ingress controller first, or set spec.ingress.mode: install to let onprem install one")
			return nil
		}
		f.ok("IngressClass %s exists (controller %s)", class, ic.Spec.Controller)
		return nil
	}
	comp := ingressComponent(env)
	if notFound {
		f.ok("IngressClass %s will be created by the %s component", class, comp)
		return nil
	}
	rel, relNS := ic.Annotations[helmReleaseNameAnnotation], ic.Annotations[helmReleaseNamespaceAnnotation]
	if rel == comp && relNS == ns {
		f.ok("IngressClass %s exists and belongs to this installation's %s release", class, comp)
		return nil
	}
	owner := "not installed by Helm"
	if rel != "" {
		owner = fmt.Sprintf("owned by Helm release %s in namespace %s", rel, relNS)
	}
	f.problem(Fail,
		fmt.Sprintf("IngressClass %s already exists (controller %s, %s): the ingress controller onprem installs would take it over", class, ic.Spec.Controller, owner),
		fmt.Sprintf("set spec.ingress.className to another name for onprem's controller, or use the existing controller with spec.ingress.mode: existing and spec.ingress.className: %s", class))
	return nil
}

// renderedNodePorts lists the fixed node ports of the rendered NodePort
// and LoadBalancer Services: "namespace/name" by port.
func renderedNodePorts(env *Env) map[int64]string {
	out := map[int64]string{}
	ns := platformNamespace(env)
	eachRenderedEntry(env, "Service", []string{"spec", "ports"}, func(_ string, o *unstructured.Unstructured, m map[string]any) {
		if np, found, _ := unstructured.NestedInt64(m, "nodePort"); found && np > 0 {
			objNS := o.GetNamespace()
			if objNS == "" {
				objNS = ns
			}
			out[np] = objNS + "/" + o.GetName()
		}
	})
	return out
}

func checkNodePorts(ctx context.Context, env *Env, f *findings) error {
	want := renderedNodePorts(env)
	if len(want) == 0 {
		f.ok("the controller's NodePort Service lets Kubernetes pick its node ports")
		return nil
	}
	svcs, err := env.Cluster.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var clashes []string
	for _, s := range svcs.Items {
		for _, p := range s.Spec.Ports {
			ours, ok := want[int64(p.NodePort)]
			if !ok || p.NodePort == 0 || ours == s.Namespace+"/"+s.Name {
				continue
			}
			clashes = append(clashes, fmt.Sprintf("node port %d (for Service %s) is used by Service %s/%s", p.NodePort, ours, s.Namespace, s.Name))
		}
	}
	sort.Strings(clashes)
	if len(clashes) > 0 {
		f.problem(Fail, strings.Join(clashes, "; "),
			"choose free node ports with spec.components.ingress.values.nodePorts (http, https), or 0 to let Kubernetes pick")
		return nil
	}
	var ports []string
	for p := range want {
		ports = append(ports, fmt.Sprint(p))
	}
	sort.Strings(ports)
	f.ok("node ports %s are free", strings.Join(ports, ", "))
	return nil
}

// tlsSecretName is the Secret that holds the certificate: the operator's
// (mode secret) or the generated one (the kubernetes.io/tls Secret of the
// credentials plan).
func tlsSecretName(env *Env) (string, bool) {
	tls := env.Installation.Spec.TLS
	if tls.Mode == config.TLSModeSecret {
		return tls.SecretName, false
	}
	for _, s := range env.Rendered.Secrets {
		if s.Type == string(corev1.SecretTypeTLS) {
			return s.Name, true
		}
	}
	return "onprem-tls", true
}

func checkTLS(ctx context.Context, env *Env, ns string, f *findings) error {
	name, generated := tlsSecretName(env)
	domain := env.Installation.Spec.Domain
	sec, err := env.Secret(ctx, ns, name)
	if apierrors.IsNotFound(err) {
		if generated {
			f.ok("a self-signed certificate for %s will be generated into Secret %s/%s", domain, ns, name)
		} else {
			f.problem(Fail, fmt.Sprintf("TLS Secret %s/%s (spec.tls.secretName) does not exist", ns, name),
				fmt.Sprintf("create it before installing: kubectl create namespace %s; kubectl -n %s create secret tls %s --cert=FULLCHAIN.pem --key=KEY.pem (a certificate for %s)", ns, ns, name, domain))
		}
		return nil
	}
	if err != nil {
		return err
	}
	where := fmt.Sprintf("Secret %s/%s", ns, name)
	if sec.Type != corev1.SecretTypeTLS {
		if generated {
			f.problem(Fail, fmt.Sprintf("%s exists with type %s, not kubernetes.io/tls, so onprem cannot keep its self-signed certificate there", where, sec.Type),
				fmt.Sprintf("delete or rename %s so onprem generates it", where))
		} else {
			f.problem(Fail, fmt.Sprintf("%s (spec.tls.secretName) is of type %s, not kubernetes.io/tls", where, sec.Type),
				fmt.Sprintf("recreate it with: kubectl -n %s create secret tls %s --cert=FULLCHAIN.pem --key=KEY.pem", ns, name))
		}
		return nil
	}
	checkCA(sec, where, generated, env.Now(), f)
	r, msg := certProblem(sec.Data[corev1.TLSCertKey], domain, env.Now())
	if r == Pass {
		f.ok("%s: %s", where, msg)
		return nil
	}
	switch {
	case generated && r == Fail && strings.Contains(msg, "does not cover"):
		// The domain changed since the certificate was generated: onprem
		// never regenerates a secret by itself.
		f.problem(Warn, fmt.Sprintf("the self-signed certificate in %s %s (the domain changed since it was generated?)", where, msg),
			fmt.Sprintf("delete it (kubectl -n %s delete secret %s) so that onprem generates a certificate for %s; clients that trusted the old CA must trust the new one", ns, name, domain))
	case generated:
		f.problem(r, fmt.Sprintf("the self-signed certificate in %s %s", where, msg),
			fmt.Sprintf("delete it (kubectl -n %s delete secret %s) so that onprem generates a new one", ns, name))
	default:
		f.problem(r, fmt.Sprintf("the certificate in %s (spec.tls.secretName) %s", where, msg),
			fmt.Sprintf("replace it with a valid certificate for %s: kubectl -n %s create secret tls %s --cert=FULLCHAIN.pem --key=KEY.pem --dry-run=client -o yaml | kubectl apply -f -", domain, ns, name))
	}
	return nil
}

// checkCA judges the expiry of the CA certificates the TLS Secret carries
// in ca.crt (onprem's self-signed CA, or the operator's): clients trust
// the CA, so its end matters as much as the certificate's.
func checkCA(sec *corev1.Secret, where string, generated bool, now time.Time, f *findings) {
	for _, c := range certs.Parse(sec.Namespace, sec.Name, "ca.crt", sec.Data["ca.crt"]) {
		r, msg := expiry(now, c.NotAfter)
		if r == Pass {
			continue
		}
		fix := "renew the CA and the certificates it signed, and give clients the new CA"
		if generated {
			fix = fmt.Sprintf("delete %s so that onprem generates a new CA and certificate (kubectl -n %s delete secret %s; then onprem install), and give clients the new CA", where, sec.Namespace, sec.Name)
		}
		f.problem(r, fmt.Sprintf("the CA certificate %s in %s (ca.crt) %s", c.Subject, where, msg), fix)
	}
}

// certProblem checks the leaf certificate of a PEM chain against the
// domain and the clock: Pass with a summary, Warn when it expires within
// 30 days or is not valid yet, Fail when it is unreadable, does not cover
// the domain or has expired.
func certProblem(chain []byte, domain string, now time.Time) (Result, string) {
	var block *pem.Block
	for {
		block, chain = pem.Decode(chain)
		if block == nil || block.Type == "CERTIFICATE" {
			break
		}
	}
	if block == nil {
		return Fail, "has no PEM certificate in tls.crt"
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return Fail, fmt.Sprintf("has a tls.crt that cannot be parsed: %v", err)
	}
	names := cert.DNSNames
	if len(names) == 0 && cert.Subject.CommonName != "" {
		names = []string{"CN " + cert.Subject.CommonName}
	}
	if err := cert.VerifyHostname(domain); err != nil {
		return Fail, fmt.Sprintf("does not cover %s (it is for %s)", domain, strings.Join(names, ", "))
	}
	if r, msg := expiry(now, cert.NotAfter); r != Pass {
		return r, msg
	}
	if now.Before(cert.NotBefore) {
		return Warn, fmt.Sprintf("is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return Pass, fmt.Sprintf("the certificate covers %s and is valid until %s", domain, cert.NotAfter.UTC().Format(time.DateOnly))
}

// expiry judges a certificate's end of validity (installer/certs): Fail
// once expired or within 7 days, Warn within 30.
func expiry(now, notAfter time.Time) (Result, string) {
	on := notAfter.UTC().Format(time.DateOnly)
	switch certs.Judge(now, notAfter) {
	case certs.Error:
		if !notAfter.After(now) {
			return Fail, fmt.Sprintf("expired on %s", on)
		}
		return Fail, fmt.Sprintf("expires in %d days, on %s (under %d days: renew it now)", certs.DaysLeft(now, notAfter), on, int(certs.FailBefore.Hours()/24))
	case certs.Warning:
		return Warn, fmt.Sprintf("expires in %d days, on %s", certs.DaysLeft(now, notAfter), on)
	}
	return Pass, ""
}
