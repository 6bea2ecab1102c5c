//go:build linux

package platform

import (
	"bytes"
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/render"
)

// e2ePlatformToken is the platform token the e2e's runtime registers with.
const e2ePlatformToken = "e2e-platform-token-5b7d0c93e1"

// checkRuntimeContract reads, in the installed objects of runtime name,
// what the upstream chart's contract carries: the runtime's name, the
// platform's URL and account, the tokens and the platform's CA by Secret
// reference (the Secrets holding what was given), every image relocated
// to the private registry, and its Ingress under the platform's domain.
func (e *env) checkRuntimeContract(ctx context.Context, name string) {
	e.t.Helper()
	ns := name
	c := e.cluster.Client
	deps, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	prefix := e.registry + "/onprem/"
	var images []string
	var proxy *corev1.Container
	for i, d := range deps.Items {
		for j, ctr := range d.Spec.Template.Spec.Containers {
			images = append(images, ctr.Image)
			if d.Name == "app-proxy" {
				proxy = &deps.Items[i].Spec.Template.Spec.Containers[j]
			}
		}
	}
	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "workflow-controller-configmap", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	images = append(images, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(cm.Data["executor"]), "image:")))
	slices.Sort(images)
	images = slices.Compact(images)
	for _, img := range images {
		if !strings.HasPrefix(img, prefix) {
			e.t.Fatalf("runtime %s: image %s is not relocated to %s", name, img, prefix)
		}
	}
	// 15 images, as the chart renders them with its own values (its two
	// cf-argocd-extras tags kept: no hand-kept list overrides them now).
	if len(images) != 15 || proxy == nil {
		e.t.Fatalf("runtime %s: %d distinct images (want the chart's 15): %v; app-proxy found: %v", name, len(images), images, proxy != nil)
	}

	env := map[string]string{}
	for _, v := range proxy.Env {
		env[v.Name] = v.Value
		if r := v.ValueFrom; r != nil && r.SecretKeyRef != nil {
			env[v.Name] = "secret:" + r.SecretKeyRef.Name + "/" + r.SecretKeyRef.Key
		}
	}
	for k, want := range map[string]string{
		"RUNTIME_NAME": name, "CODEFRESH_URL": "https://" + domain, "CODEFRESH_ACCOUNT_ID": e2eAccount, "IS_CONFIGURATION_RUNTIME": "true",
		"CODEFRESH_USER_TOKEN": "secret:" + render.RuntimePlatformToken + "/" + render.RuntimePlatformTokenKey,
		"GIT_PASSWORD":         "secret:" + render.RuntimeGitCredentials + "/" + render.RuntimeGitPasswordKey,
		"NODE_EXTRA_CA_CERTS":  "/etc/ssl/platform/" + render.RuntimePlatformCAKey,
	} {
		if env[k] != want {
			e.t.Fatalf("runtime %s: app-proxy %s = %q, want %q", name, k, env[k], want)
		}
	}
	secret := func(ns, n string) map[string][]byte {
		s, err := c.CoreV1().Secrets(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			e.t.Fatalf("Secret %s/%s: %v", ns, n, err)
		}
		return s.Data
	}
	if string(secret(ns, render.RuntimePlatformToken)[render.RuntimePlatformTokenKey]) != e2ePlatformToken {
		e.t.Fatalf("runtime %s: Secret %s does not hold the platform token given", name, render.RuntimePlatformToken)
	}
	if ca := secret(namespace, "onprem-tls")["ca.crt"]; len(ca) == 0 || !bytes.Equal(secret(ns, render.RuntimePlatformCA)[render.RuntimePlatformCAKey], ca) {
		e.t.Fatalf("runtime %s: Secret %s does not hold the platform's CA", name, render.RuntimePlatformCA)
	}

	host := name + ".runtimes." + domain
	ing, err := c.NetworkingV1().Ingresses(ns).Get(ctx, "gitops-runtime", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != host || ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "onprem" {
		e.t.Fatalf("runtime %s: Ingress %+v, want host %s class onprem", name, ing.Spec, host)
	}
	e.t.Logf("runtime %s: upstream contract in the installed objects: name, URL %s, account, token and CA by reference, %d images under %s, Ingress %s",
		name, env["CODEFRESH_URL"], len(images), prefix, host)
}
