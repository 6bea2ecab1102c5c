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

// checkRuntimeContract reads, in the installed objects of runtime name
// (the real gitops-runtime chart, with the ring's stand-in images), what
// the upstream chart's contract carries and what installing it for real
// exercised: the runtime's name, the platform's URL and account, the
// tokens and the platform's CA by Secret reference (the Secrets holding
// what was given); every pod running or completed, admitted by the
// restricted Pod Security Standard that the namespace enforces, every
// image from the ring's registry; the chart's
// pre-install hooks done (the Secret argocd-redis that one makes, which
// Redis and Argo CD read); the CRDs of the chart's crds/ folders served;
// and its Ingress under the platform's domain.
func (e *env) checkRuntimeContract(ctx context.Context, name string) {
	e.t.Helper()
	ns := name
	c := e.cluster.Client
	prefix := e.registry + "/onprem/"

	nsObj, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if lvl := nsObj.Labels["pod-security.kubernetes.io/enforce"]; lvl != "restricted" {
		e.t.Fatalf("runtime %s: the namespace enforces Pod Security %q, want restricted", name, lvl)
	}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var images []string
	running, completed := 0, 0
	for _, p := range pods.Items {
		switch p.Status.Phase {
		case corev1.PodRunning:
			running++
		case corev1.PodSucceeded:
			completed++
		default:
			e.t.Fatalf("runtime %s: pod %s is %s: %s", name, p.Name, p.Status.Phase, p.Status.Message)
		}
		for _, ctr := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			images = append(images, ctr.Image)
		}
		for _, st := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if !strings.HasPrefix(st.Image, prefix) {
				e.t.Fatalf("runtime %s: pod %s ran %s, not from %s", name, p.Name, st.Image, prefix)
			}
		}
	}
	slices.Sort(images)
	images = slices.Compact(images)
	for _, img := range images {
		if !strings.HasPrefix(img, prefix) {
			e.t.Fatalf("runtime %s: image %s is not relocated to %s", name, img, prefix)
		}
	}
	if running < 15 {
		e.t.Fatalf("runtime %s: %d pods running (the chart runs Argo CD, Workflows, Events, Rollouts, app-proxy and more)", name, running)
	}

	cms := map[string]map[string]string{}
	cmList, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, cm := range cmList.Items {
		cms[cm.Name] = cm.Data
	}
	deps, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var proxy *corev1.Container
	caRefs := 0
	for i, d := range deps.Items {
		spec := &deps.Items[i].Spec.Template.Spec
		for j, ctr := range spec.Containers {
			if d.Name == "cap-app-proxy" && ctr.Name == "cap-app-proxy" {
				proxy = &spec.Containers[j]
			}
		}
		for _, v := range spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == render.RuntimePlatformCA {
				caRefs++
			}
			if v.Projected != nil {
				for _, src := range v.Projected.Sources {
					if src.Secret != nil && src.Secret.Name == render.RuntimePlatformCA {
						caRefs++
					}
				}
			}
		}
	}
	if proxy == nil {
		e.t.Fatalf("runtime %s: no app-proxy (Deployment cap-app-proxy)", name)
	}
	// The chart gives app-proxy most of its settings through its
	// ConfigMaps: each variable is resolved as the kubelet would.
	env := map[string]string{}
	for _, v := range proxy.Env {
		env[v.Name] = v.Value
		if r := v.ValueFrom; r != nil && r.SecretKeyRef != nil {
			env[v.Name] = "secret:" + r.SecretKeyRef.Name + "/" + r.SecretKeyRef.Key
		}
		if r := v.ValueFrom; r != nil && r.ConfigMapKeyRef != nil {
			env[v.Name] = cms[r.ConfigMapKeyRef.Name][r.ConfigMapKeyRef.Key]
		}
	}
	for k, want := range map[string]string{
		"RUNTIME_NAME": name, "CF_HOST": "https://" + domain, "IS_CONFIGURATION_RUNTIME": "true",
		"USER_TOKEN":   "secret:" + render.RuntimePlatformToken + "/" + render.RuntimePlatformTokenKey,
		"GIT_PASSWORD": "secret:" + render.RuntimeGitCredentials + "/" + render.RuntimeGitPasswordKey,
	} {
		if env[k] != want {
			e.t.Fatalf("runtime %s: app-proxy %s = %q, want %q", name, k, env[k], want)
		}
	}
	accountIn := ""
	for n, data := range cms {
		for _, v := range data {
			if strings.Contains(v, e2eAccount) {
				accountIn = n
			}
		}
	}
	if accountIn == "" {
		e.t.Fatalf("runtime %s: no ConfigMap carries the platform account %s", name, e2eAccount)
	}
	secret := func(n string) map[string][]byte {
		s, err := c.CoreV1().Secrets(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			e.t.Fatalf("Secret %s/%s: %v", ns, n, err)
		}
		return s.Data
	}
	if string(secret(render.RuntimePlatformToken)[render.RuntimePlatformTokenKey]) != e2ePlatformToken {
		e.t.Fatalf("runtime %s: Secret %s does not hold the platform token given", name, render.RuntimePlatformToken)
	}
	tls, err := c.CoreV1().Secrets(namespace).Get(ctx, "onprem-tls", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if ca := tls.Data["ca.crt"]; len(ca) == 0 || !bytes.Equal(secret(render.RuntimePlatformCA)[render.RuntimePlatformCAKey], ca) {
		e.t.Fatalf("runtime %s: Secret %s does not hold the platform's CA", name, render.RuntimePlatformCA)
	}
	if caRefs == 0 {
		e.t.Fatalf("runtime %s: no Deployment mounts the platform's CA (Secret %s)", name, render.RuntimePlatformCA)
	}

	// The pre-install hooks ran to completion (Helm fails the install
	// otherwise; their Jobs are gone after their TTL): the one that makes
	// Redis's password made argocd-redis (the stand-in's label says who
	// created it), and Redis and Argo CD started with it.
	redis, err := c.CoreV1().Secrets(ns).Get(ctx, "argocd-redis", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("runtime %s: Secret argocd-redis, which the chart's pre-install hook makes: %v", name, err)
	}
	if len(redis.Data["auth"]) == 0 || redis.Labels["app.kubernetes.io/created-by"] != "gitops-standin" {
		e.t.Fatalf("runtime %s: Secret argocd-redis was not made by the hook (labels %v, %d bytes of password)", name, redis.Labels, len(redis.Data["auth"]))
	}

	// The CRDs of the chart's crds/ folders, installed by Helm.
	for _, gv := range []string{"argoproj.io/v1alpha1"} {
		res, err := c.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			e.t.Fatalf("runtime %s: %s: %v", name, gv, err)
		}
		var kinds []string
		for _, r := range res.APIResources {
			if !strings.Contains(r.Name, "/") {
				kinds = append(kinds, r.Kind)
			}
		}
		for _, k := range []string{"Application", "AppProject", "ApplicationSet", "EventBus", "EventSource", "Sensor", "Workflow", "Rollout"} {
			if !slices.Contains(kinds, k) {
				e.t.Fatalf("runtime %s: the cluster serves no %s in %s (it serves %v)", name, k, gv, kinds)
			}
		}
	}

	host := name + ".runtimes." + domain
	ings, err := c.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	found := false
	for _, ing := range ings.Items {
		if len(ing.Spec.Rules) == 1 && ing.Spec.Rules[0].Host == host && ing.Spec.IngressClassName != nil && *ing.Spec.IngressClassName == "onprem" {
			found = true
		}
	}
	if !found {
		e.t.Fatalf("runtime %s: no Ingress for host %s of class onprem among %d", name, host, len(ings.Items))
	}
	e.t.Logf("runtime %s: the real chart installed: %d pods running and %d completed, %d distinct images under %s, hooks done, CRDs served; upstream contract in the installed objects: name, URL %s, account (ConfigMap %s), token and CA by reference, Ingress %s",
		name, running, completed, len(images), prefix, env["CF_HOST"], accountIn, host)
}
