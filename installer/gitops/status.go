package gitops

import (
	"context"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
)

// Status is one runtime as recorded and as found on its cluster.
type Status struct {
	Name      string `json:"name"`
	Server    string `json:"server"`
	Context   string `json:"context,omitempty"`
	Namespace string `json:"namespace"`
	Version   string `json:"version"`
	Chart     string `json:"chart"`
	Revision  int    `json:"revision"`
	// Config: this runtime holds the configuration.
	Config bool `json:"config"`
	// Recorded is the outcome of its last install or upgrade.
	Recorded string `json:"recorded"`
	// Reachable: onprem reached the runtime's cluster; when not, Problem
	// says why and nothing below is known.
	Reachable bool   `json:"reachable"`
	Release   string `json:"release,omitempty"`
	// Workloads is ready/desired replicas per Deployment of the runtime.
	Workloads map[string]string `json:"workloads,omitempty"`
	Ready     bool              `json:"ready"`
	Problem   string            `json:"problem,omitempty"`
}

// Recorded is the status of a runtime from its record alone.
func Recorded(st *state.State, name string) Status {
	rec := st.Runtimes[name]
	chart := ""
	if rec.Chart != "" {
		chart = rec.Chart + "-" + rec.ChartVersion
	}
	return Status{Name: name, Server: rec.Server, Context: rec.Context, Namespace: rec.Namespace, Version: rec.Version,
		Chart: chart, Revision: rec.Revision, Recorded: rec.Status, Config: ConfigRuntime(st) == name}
}

// Unreachable is the status of a runtime whose cluster could not be reached.
func Unreachable(st *state.State, name string, err error) Status {
	s := Recorded(st, name)
	s.Problem = "unreachable: " + err.Error()
	return s
}

// Observe reads a runtime's release and Deployments on its cluster. It
// never fails: what it cannot read is said in Problem.
func Observe(ctx context.Context, cl *kube.Cluster, st *state.State, name string) Status {
	s := Recorded(st, name)
	rec := st.Runtimes[name]
	if !attachmentOf(name, rec).Observe(ctx, cl, rec.Server).Into(&s.Reachable, &s.Release, &s.Revision, &s.Problem) {
		return s
	}
	deps, err := cl.Client.AppsV1().Deployments(rec.Namespace).List(ctx, metav1.ListOptions{LabelSelector: render.ComponentLabel + "=" + rec.Release})
	if err != nil {
		if s.Problem == "" {
			s.Problem = "listing its Deployments: " + err.Error()
		}
		return s
	}
	sort.Slice(deps.Items, func(i, j int) bool { return deps.Items[i].Name < deps.Items[j].Name })
	s.Workloads = map[string]string{}
	s.Ready = len(deps.Items) > 0 && s.Release == "deployed"
	for i := range deps.Items {
		r := attachment.ReadinessOf(&deps.Items[i])
		s.Workloads[deps.Items[i].Name] = fmt.Sprintf("%d/%d", r.Ready, r.Desired)
		if r.Ready < r.Desired {
			s.Ready = false
		}
	}
	return s
}
