package gitops

import (
	"context"
	"fmt"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// TokenEnv is the environment variable 'onprem runtime install' reads the
// Git token from when no --git-token-file is given.
const TokenEnv = "ONPREM_GIT_TOKEN"

// PlatformTokenEnv is the environment variable 'onprem runtime install'
// reads the platform token from when no file is given.
const PlatformTokenEnv = "ONPREM_PLATFORM_TOKEN"

// ArgoApplicationsCRD is the CRD every Argo CD installation has: the mark of
// a runtime (or a foreign Argo CD) on a cluster.
const ArgoApplicationsCRD = "applications.argoproj.io"

// InputError is something missing or wrong in what the operator gave.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// NotFound says that no runtime called name is recorded in st.
func NotFound(st *state.State, name string) *attachment.NotFoundError {
	return &attachment.NotFoundError{Kind: "runtime", Recorded: "installed in", Name: name, Known: Names(st)}
}

// Names lists the recorded runtimes, sorted.
func Names(st *state.State) []string { return attachment.Names(st.Runtimes) }

// Connect reaches a runtime's (or a managed cluster's) cluster, like
// runner.Connect (attachment.Connect): the platform's connection itself
// when ref names no other cluster; an unreachable one comes back as
// kube.Connect's error, wrapped with what it is for.
func Connect(ctx context.Context, what string, ref config.ClusterRef, platform kube.Options, platformCluster *kube.Cluster) (*kube.Cluster, error) {
	return attachment.Connect(ctx, what, ref, platform, platformCluster)
}

// RecordRef is the cluster reference recorded for a runtime.
func RecordRef(rec state.Runtime) config.ClusterRef {
	return config.ClusterRef{Kubeconfig: rec.Kubeconfig, Context: rec.Context}
}

func where(r state.Runtime) string {
	return attachment.Place{Server: r.Server, Context: r.Context, Namespace: r.Namespace}.Where()
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// CheckPlace refuses a runtime called name on cluster cl in namespace when
// the name is taken by a runtime elsewhere (names are unique in the
// installation), when another runtime already runs on that cluster (one
// per cluster), when the namespace is the platform's, or when the cluster
// has an Argo CD that no runtime of this installation installed. The same
// name at the same place is a re-install: allowed.
func CheckPlace(ctx context.Context, p *Platform, name string, cl *kube.Cluster, namespace string) error {
	if rec, ok := p.State.Runtimes[name]; ok && (rec.Server != cl.Server || rec.Namespace != namespace) {
		return &attachment.ConflictError{Msg: fmt.Sprintf("runtime %s is already installed on %s: runtime names are unique in an installation; "+
			"choose another name, or remove it first with 'onprem runtime uninstall %s'", name, where(rec), name)}
	}
	for _, other := range Names(p.State) {
		rec := p.State.Runtimes[other]
		if other != name && rec.Server == cl.Server {
			return &attachment.ConflictError{Msg: fmt.Sprintf("runtime %s: the cluster at %s already runs runtime %s (namespace %s): a cluster runs one runtime; "+
				"install %s on another cluster (--context / --kubeconfig), or remove %s first with 'onprem runtime uninstall %s'",
				name, cl.Server, other, rec.Namespace, name, other, other)}
		}
	}
	if cl.Server == p.Cluster.Server && namespace == p.Namespace {
		return &attachment.ConflictError{Msg: fmt.Sprintf("runtime %s: namespace %s is the platform's own: give the runtime a namespace of its own (the default is its name)", name, namespace)}
	}
	mc, err := metadata.NewForConfig(cl.Config)
	if err != nil {
		return fmt.Errorf("runtime %s: metadata client: %w", name, err)
	}
	crd, err := mc.Resource(crdResource).Get(ctx, ArgoApplicationsCRD, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("runtime %s: reading CustomResourceDefinition %s on %s: %w", name, ArgoApplicationsCRD, cl.Server, err)
	}
	owner := crd.Annotations["meta.helm.sh/release-name"]
	ownerNS := crd.Annotations["meta.helm.sh/release-namespace"]
	if owner == config.RuntimeRelease(name) && ownerNS == namespace {
		return nil
	}
	desc := "no Helm release"
	if owner != "" {
		desc = fmt.Sprintf("Helm release %s in namespace %s", owner, ownerNS)
	}
	return &attachment.ConflictError{Msg: fmt.Sprintf("runtime %s: the cluster at %s already has an Argo CD that is not this installation's (CRD %s, %s): a cluster runs one runtime; "+
		"install the runtime on another cluster (--context / --kubeconfig), or remove that Argo CD, CRDs included, if nothing uses it", name, cl.Server, ArgoApplicationsCRD, desc)}
}

// redactURL drops credentials written into a URL (https://user:pw@host).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}
