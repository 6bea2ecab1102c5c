package preflight

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"onprem.dev/onprem/installer/config"
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
	f.ok("runtime names are unique and at most one runtime runs per cluster (checked with the configuration)")
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
			if partOf == "onprem" && (inst == "" || inst == ours) {
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
