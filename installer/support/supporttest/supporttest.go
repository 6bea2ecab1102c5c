// Package supporttest proves a support bundle safe: it reads every Secret
// of a cluster and looks for their values in a bundle's files. Its rules
// of what is a secret are written apart from the redaction's, so that a
// value the redaction wrongly leaves out is found.
package supporttest

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Needles returns every secret value of every Secret of the cluster, in
// the forms a bundle could hold it (itself, base64, each long line of a
// multi-line value), each with where it comes from. Not secrets: Helm's
// release records, onprem's state record and configuration (the bundle
// holds them as they are), the keys a generated Secret declares public
// (user names, certificates), certificates, and values shorter than 6
// bytes (a redaction cannot hide "true" everywhere), the public keys of
// Kubernetes' own token Secrets, and the non-secret fields of Argo CD's
// repository and cluster Secrets. Generated counts the
// values of Secrets onprem generated.
func Needles(ctx context.Context, c kubernetes.Interface) (needles map[string]string, generated int, err error) {
	list, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("listing every Secret: %w", err)
	}
	needles = map[string]string{}
	for _, s := range list.Items {
		if s.Type == "helm.sh/release.v1" || s.Name == "onprem-state" || s.Name == "onprem-config" {
			continue
		}
		public := strings.Split(s.Annotations["onprem.dev/public-keys"], ",")
		if s.Labels["argocd.argoproj.io/secret-type"] != "" {
			// Argo CD's documented non-secret fields.
			public = append(public, "url", "name", "server", "type", "project", "username", "namespaces", "clusterResources")
		}
		for key, v := range s.Data {
			if slices.Contains(public, key) || key == "ca.crt" || key == "tls.crt" || len(v) < 6 || kubernetesPublic(s.Type, key) {
				continue
			}
			if s.Labels["onprem.dev/generated"] == "true" {
				generated++
			}
			where := fmt.Sprintf("Secret %s/%s key %s", s.Namespace, s.Name, key)
			needles[string(v)] = where
			needles[base64.StdEncoding.EncodeToString(v)] = where + " (base64)"
			for _, line := range strings.Split(string(v), "\n") {
				if line = strings.TrimSpace(line); len(line) >= 16 && !strings.HasPrefix(line, "-----") {
					needles[line] = where + " (a line of it)"
				}
			}
		}
	}
	return needles, generated, nil
}

// kubernetesPublic: the keys of Kubernetes' own Secret types that are not
// secret (a service account token's namespace, a bootstrap token's ID and
// settings; its secret half is token-secret).
func kubernetesPublic(t corev1.SecretType, key string) bool {
	switch t {
	case corev1.SecretTypeServiceAccountToken:
		return key == "namespace"
	case corev1.SecretTypeBootstrapToken:
		return key != "token-secret"
	}
	return false
}

// Leaks returns, for each file that holds a needle, the file and where the
// needle comes from; nil when the files hold none.
func Leaks(files map[string][]byte, needles map[string]string) []string {
	var out []string
	for path, data := range files {
		for n, where := range needles {
			if strings.Contains(string(data), n) {
				out = append(out, path+" holds the value of "+where)
			}
		}
	}
	sort.Strings(out)
	return out
}
