package runner

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// Workload names of the runner chart (charts/runner).
const (
	AgentDeployment  = "runner-agent"
	EngineDeployment = "runner-engine"
)

// Readiness is ready over desired replicas of a workload.
type Readiness = attachment.Readiness

// Status is one runner as recorded and as found on its cluster.
type Status struct {
	Name            string `json:"name"`
	Server          string `json:"server"`
	Context         string `json:"context,omitempty"`
	Namespace       string `json:"namespace"`
	EngineNamespace string `json:"engineNamespace"`
	Version         string `json:"version"`
	Chart           string `json:"chart"`
	Revision        int    `json:"revision"`
	// Recorded is the outcome of its last install or upgrade.
	Recorded string `json:"recorded"`
	// Reachable: onprem reached the runner's cluster. When not, Problem
	// says why and nothing below is known.
	Reachable bool `json:"reachable"`
	// Release is Helm's status of the runner's release.
	Release string    `json:"release,omitempty"`
	Agent   Readiness `json:"agent"`
	Engine  Readiness `json:"engine"`
	// Ready: every agent and engine replica is ready.
	Ready   bool   `json:"ready"`
	Problem string `json:"problem,omitempty"`
}

// Recorded is the status of a runner from its record alone.
func Recorded(name string, rec state.Runner) Status {
	chart := ""
	if rec.Chart != "" {
		chart = rec.Chart + "-" + rec.ChartVersion
	}
	return Status{Name: name, Server: rec.Server, Context: rec.Context, Namespace: rec.Namespace, EngineNamespace: rec.EngineNamespace,
		Version: rec.Version, Chart: chart, Revision: rec.Revision, Recorded: rec.Status}
}

// Unreachable is the status of a runner whose cluster could not be reached.
func Unreachable(name string, rec state.Runner, err error) Status {
	s := Recorded(name, rec)
	s.Problem = "unreachable: " + err.Error()
	return s
}

// Observe reads a runner's release and workloads on its cluster. It never
// fails: what it cannot read is said in Problem.
func Observe(ctx context.Context, cl *kube.Cluster, name string, rec state.Runner) Status {
	s := Recorded(name, rec)
	if !attachmentOf(name, rec).Observe(ctx, cl, rec.Server).Into(&s.Reachable, &s.Release, &s.Revision, &s.Problem) {
		return s
	}
	read := func(ns, dep string) Readiness {
		d, err := cl.Client.AppsV1().Deployments(ns).Get(ctx, dep, metav1.GetOptions{})
		if err != nil {
			if s.Problem == "" && !apierrors.IsNotFound(err) {
				s.Problem = "reading Deployment " + ns + "/" + dep + ": " + err.Error()
			}
			return Readiness{}
		}
		return attachment.ReadinessOf(d)
	}
	s.Agent = read(rec.Namespace, AgentDeployment)
	s.Engine = read(rec.EngineNamespace, EngineDeployment)
	s.Ready = s.Agent.OK() && s.Engine.OK()
	return s
}
