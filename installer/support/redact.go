// Package support writes a support bundle: a snapshot of the installation
// (installer/snapshot) with every secret redacted, the analyzers' findings
// (installer/doctor), a summary for humans and an index of every file, in
// one .tar.gz that is safe to send.
package support

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
)

// minValueLength is the shortest value of an operator's Secret that is
// replaced everywhere: a shorter one ("true", "admin") would replace
// ordinary words. Generated Secrets' values are always long.
const minValueLength = 6

// Redactor replaces secret values and anything shaped like a secret.
type Redactor struct {
	values *secrets.Redactor
}

// shapes are secret-looking text, whatever its value: each match keeps
// group 1 (the key or the scheme) and loses the rest.
var shapes = []struct {
	re   *regexp.Regexp
	repl string
}{
	// PEM private keys, whole.
	{regexp.MustCompile(`-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----`), "<redacted ${1}private key>"},
	// Authorization headers and bearer tokens.
	{regexp.MustCompile(`(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9\-._~+/]{8,}=*`), "${1}" + secrets.Redacted},
	// user:password@ in URLs (basic auth, database connection strings).
	{regexp.MustCompile(`(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@"'<>]+:)[^@\s/"'<>]+@`), "${1}" + secrets.Redacted + "@"},
}

// pairs are key=value and "key": "value" text whose key names a secret
// (env, JSON, YAML, flags). Group 1 is the key, 2 the value, which ends
// at a backslash too: in JSON's escaped text one starts the next line.
var pairs = regexp.MustCompile(`(?i)((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|client[_-]?secret|credentials?)["']?[ \t]*[:=][ \t]*["']?)([^\s"'&,;{}\[\]<>\\][^\s"'&,;{}<>\\]*)`)

// plain are values of a secret-named key that are no secret: JSON's
// literals and numbers (replacing them would also break the JSON).
var plain = regexp.MustCompile(`^(?:true|false|null|-?[0-9]+(?:\.[0-9]+)?|<redacted[^>]*>)$`)

// NewRedactor returns a Redactor of the given secret values.
func NewRedactor(values [][]byte) *Redactor {
	return &Redactor{values: secrets.NewRedactor(values...)}
}

// Redact returns text without the values and the secret shapes.
func (r *Redactor) Redact(text string) string {
	text = r.values.Redact(text)
	for _, s := range shapes {
		text = s.re.ReplaceAllString(text, s.repl)
	}
	return pairs.ReplaceAllStringFunc(text, func(m string) string {
		sub := pairs.FindStringSubmatch(m)
		if plain.MatchString(sub[2]) {
			return m
		}
		return sub[1] + secrets.Redacted
	})
}

// SecretValues reads the values to redact from the Secrets of the given
// namespaces: every value of every Secret, but not Helm's own release
// records (never written to a bundle, and their data is the releases'
// values, redacted on their own), onprem's state record and effective
// configuration (no secret in either), the keys a generated Secret declares
// public (user names, certificates), certificates, and an operator's
// values shorter than minValueLength.
func SecretValues(ctx context.Context, c kubernetes.Interface, namespaces []string) ([][]byte, error) {
	var out [][]byte
	for _, ns := range namespaces {
		l, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading the Secrets of namespace %s to redact their values (the bundle is not written without them): %w", ns, err)
		}
		for _, s := range l.Items {
			out = append(out, valuesOf(&s)...)
		}
	}
	return out, nil
}

func valuesOf(s *corev1.Secret) [][]byte {
	// onprem's record and the effective configuration hold no secret
	// (both are in the bundle, as themselves); Helm's records are not.
	if s.Type == "helm.sh/release.v1" || s.Name == state.SecretName || s.Name == backup.ConfigSecret {
		return nil
	}
	generated := s.Labels[secrets.LabelGenerated] == "true"
	// The keys a Secret declares public (onprem's generated Secrets and
	// the runtime's Git credentials do; an operator may too), and the
	// documented non-secret fields of Argo CD's repository and cluster
	// Secrets.
	public := map[string]bool{}
	for _, k := range strings.Split(s.Annotations[secrets.AnnotationPublicKeys], ",") {
		public[strings.TrimSpace(k)] = true
	}
	if s.Labels[argoSecretType] != "" {
		for _, k := range argoPublicKeys {
			public[k] = true
		}
	}
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out [][]byte
	for _, k := range keys {
		v := s.Data[k]
		switch {
		case public[k], k == "ca.crt", k == "tls.crt", len(v) == 0, publicKey(s.Type, k):
		case !generated && len(v) < minValueLength:
		default:
			out = append(out, v)
		}
	}
	return out
}

// RedactReport returns a copy of rep with its titles and evidence
// redacted: what doctor prints comes from logs and objects as they are.
func RedactReport(rep *doctor.Report, r *Redactor) *doctor.Report {
	out := &doctor.Report{Analyzers: rep.Analyzers, Findings: make([]doctor.Finding, len(rep.Findings))}
	for i, f := range rep.Findings {
		f.Title = r.Redact(f.Title)
		ev := make([]string, len(f.Evidence))
		for j, e := range f.Evidence {
			ev[j] = r.Redact(e)
		}
		f.Evidence = ev
		out.Findings[i] = f
	}
	return out
}

// argoSecretType labels Argo CD's repository, credential template and
// cluster Secrets; argoPublicKeys are their fields that hold no secret
// (the password, sshPrivateKey, config with its bearer token do).
const argoSecretType = "argocd.argoproj.io/secret-type"

var argoPublicKeys = []string{"url", "name", "server", "type", "project", "username", "namespaces", "clusterResources"}

// publicKey says whether a key of a Secret of Kubernetes' own types holds
// no secret: a service account token's namespace, a bootstrap token's ID
// (the public half of the token).
func publicKey(t corev1.SecretType, key string) bool {
	switch t {
	case corev1.SecretTypeServiceAccountToken:
		return key == "namespace"
	case corev1.SecretTypeBootstrapToken:
		return key == "token-id" || key == "usage-bootstrap-authentication" || key == "usage-bootstrap-signing" || key == "auth-extra-groups" || key == "description" || key == "expiration"
	}
	return false
}
