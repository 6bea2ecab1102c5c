package preflight

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/state"
)

const runtimesID = "runtimes"

// argoApplicationsCRD is the CRD every Argo CD installation has.
const argoApplicationsCRD = "applications.argoproj.io"

// Labels that tell onprem's own objects.
const (
	partOfLabel       = "app.kubernetes.io/part-of"
	installationLabel = "onprem.dev/installation"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// runtimesCheck: a GitOps runtime on the platform's cluster does not meet
// an Argo CD that another installation put there. Other clusters are
// checked by the runtimes' own preflight, which connects to them.
func runtimesCheck() Check {
	return Check{
		ID:       runtimesID,
		Title:    "the cluster of each GitOps runtime hosts no other Argo CD installation",
		Severity: Blocking,
		Run:      runRuntimes,
	}
}

// onPlatformCluster reports whether a runtime's cluster is the one onprem
// is connected to: no kubeconfig or context given, or the same ones.
func onPlatformCluster(ref config.ClusterRef, env *Env) bool {
	if ref.Kubeconfig != "" && ref.Kubeconfig != env.Cluster.Kubeconfig {
		return false
	}
	if ref.Context != "" && ref.Context != env.Cluster.Context {
		return false
	}
	return true
}

func runtimeName(r config.Runtime) string {
	if r.Name == "" {
		return config.DefaultRuntimeName
	}
	return r.Name
}

func runRuntimes(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Blocking, "cluster", "installation"); !ok {
		return out
	}
	rts := env.Installation.Spec.Runtimes
	if len(rts) == 0 {
		return Passed("no GitOps runtime is configured")
	}
	var local, remote []string
	for _, r := range rts {
		if onPlatformCluster(r.Cluster, env) {
			local = append(local, runtimeName(r))
		} else {
			where := r.Cluster.Context
			if where == "" {
				where = r.Cluster.Kubeconfig
			}
			remote = append(remote, runtimeName(r)+" (cluster "+where+")")
		}
	}
	var f findings
	f.ok("runtime names are unique and at most one runtime runs per cluster in the configuration")
	if out, ok := checkRecordedRuntimes(ctx, env, rts, &f); !ok {
		return out
	}
	if len(local) > 0 {
		if env.Cluster.Config == nil {
			return missingInput(Blocking, "the cluster connection")
		}
		mc, err := metadata.NewForConfig(env.Cluster.Config)
		if err != nil {
			return cannotRun(Blocking, runtimesID, "make a metadata client", err)
		}
		crd, err := mc.Resource(crdResource).Get(ctx, argoApplicationsCRD, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			f.ok("runtime %s: the platform's cluster has no Argo CD yet", strings.Join(local, ", "))
		case err != nil:
			return cannotRun(Blocking, runtimesID, "read CustomResourceDefinition "+argoApplicationsCRD, err)
		default:
			ours := env.Installation.Metadata.Name
			if ours == "" {
				ours = config.DefaultName
			}
			partOf, inst := crd.Labels[partOfLabel], crd.Labels[installationLabel]
			// onprem's own objects are part-of onprem; a runtime's, which
			// keep the upstream chart's part-of, carry the installation
			// label alone.
			if (partOf == "onprem" && (inst == "" || inst == ours)) || inst == ours {
				f.ok("runtime %s: the Argo CD CRDs on the platform's cluster are this installation's", strings.Join(local, ", "))
				break
			}
			owner := "part-of " + clusterOrNone([]string{partOf})
			if partOf == "" {
				owner = "no " + partOfLabel + " label"
			}
			if partOf == "onprem" {
				owner = "onprem installation " + inst
			}
			if h := crd.Annotations[helmReleaseNameAnnotation]; h != "" {
				owner += fmt.Sprintf(", Helm release %s in namespace %s", h, crd.Annotations[helmReleaseNamespaceAnnotation])
			}
			f.problem(Fail,
				fmt.Sprintf("Argo CD CRDs from another installation are present on the platform's cluster (CRD %s: %s), where runtime %s would install its own Argo CD",
					argoApplicationsCRD, owner, strings.Join(local, ", ")),
				"choose one: (1) use that Argo CD for the runtime: not supported yet; (2) remove that Argo CD installation, CRDs included, if nothing uses it any more; "+
					"(3) run the runtime on another cluster (spec.runtimes[].cluster.kubeconfig / context)")
		}
	}
	if len(remote) > 0 {
		f.problem(Warn,
			fmt.Sprintf("runtime %s run%s on other clusters, which this check does not connect to: whether they already host an Argo CD is checked when the runtimes are installed",
				strings.Join(remote, ", "), clusterVerbS(len(remote))),
			"nothing to do now; to know in advance, look for applications.argoproj.io on those clusters (kubectl --context CONTEXT get crd applications.argoproj.io)")
	}
	return f.outcome()
}

// checkRecordedRuntimes compares the configuration's runtimes with the
// ones the installation already records: a name installed elsewhere, or a
// cluster that already runs a runtime of another name, is refused before
// anything is installed.
func checkRecordedRuntimes(ctx context.Context, env *Env, rts []config.Runtime, f *findings) (Outcome, bool) {
	if env.Cluster.Client == nil {
		return missingInput(Blocking, "the cluster connection"), false
	}
	ns := env.Installation.Spec.Namespace
	st, err := state.NewStore(env.Cluster.Client, ns).Load(ctx)
	if err != nil {
		var corrupt *state.CorruptError
		if errors.As(err, &corrupt) {
			// The installation check reports a corrupt record.
			return Outcome{}, true
		}
		return cannotRun(Blocking, runtimesID, fmt.Sprintf("read the state record (Secret %s/%s)", ns, state.SecretName), err), false
	}
	if len(st.Runtimes) == 0 {
		return Outcome{}, true
	}
	// Where a recorded runtime runs, as the configuration names clusters.
	sameCluster := func(r config.Runtime, rec state.Runtime) bool {
		if onPlatformCluster(r.Cluster, env) {
			return rec.Server == env.Cluster.Server
		}
		return (r.Cluster.Context == "" || r.Cluster.Context == rec.Context) &&
			(r.Cluster.Kubeconfig == "" || rec.Kubeconfig == "" || sameFile(r.Cluster.Kubeconfig, rec.Kubeconfig)) &&
			rec.Server != env.Cluster.Server
	}
	bad := 0
	for i, r := range rts {
		name := runtimeName(r)
		for other, rec := range st.Runtimes {
			switch {
			case other == name && !sameCluster(r, rec):
				bad++
				f.problem(Fail, fmt.Sprintf("spec.runtimes[%d]: runtime %s is already installed on the cluster at %s (namespace %s), not on the cluster the configuration names: runtime names are unique in an installation", i, name, rec.Server, rec.Namespace),
					fmt.Sprintf("give this runtime another name, or point spec.runtimes[%d].cluster at the cluster it runs on, or remove it first with 'onprem runtime uninstall %s'", i, name))
			case other != name && sameCluster(r, rec):
				bad++
				f.problem(Fail, fmt.Sprintf("spec.runtimes[%d]: the cluster of runtime %s already runs runtime %s (at %s, namespace %s): a cluster runs one runtime", i, name, other, rec.Server, rec.Namespace),
					fmt.Sprintf("install %s on another cluster (spec.runtimes[%d].cluster), or remove %s first with 'onprem runtime uninstall %s'", name, i, other, other))
			}
		}
	}
	if bad == 0 {
		f.ok("the installation's runtimes (%d recorded) agree with the configuration", len(st.Runtimes))
	}
	return Outcome{}, true
}

func sameFile(a, b string) bool {
	fa, errA := filepath.Abs(a)
	fb, errB := filepath.Abs(b)
	return errA == nil && errB == nil && fa == fb
}
