package preflight

import (
	"context"
	"fmt"
)

const kubernetesVersionID = "kubernetes.version"

// kubernetesVersionCheck: the API server's version is in the range the
// release supports (hashicorp go-version: provider versions such as
// v1.33.4-eks-1234 compare by their release core).
func kubernetesVersionCheck() Check {
	return Check{
		ID:       kubernetesVersionID,
		Title:    "the cluster's Kubernetes version is one the platform release supports",
		Severity: Blocking,
		Run:      runKubernetesVersion,
	}
}

func runKubernetesVersion(_ context.Context, env *Env) Outcome {
	if env.Cluster == nil {
		return missingInput(Blocking, "the cluster connection")
	}
	if out, ok := requireEnv(env, Blocking, "release"); !ok {
		return out
	}
	server := env.Cluster.ServerVersion
	if server == "" {
		server = env.Cluster.Info.GitVersion
	}
	rel := env.Release
	if server == "" {
		return Outcome{Result: Fail,
			Message:     "the API server did not report its version",
			Remediation: "check that the kubeconfig points at a Kubernetes API server ('kubectl version') and run preflight again"}
	}
	ok, err := rel.SupportsKubernetes(server)
	if err != nil {
		return Outcome{Result: Fail,
			Message: fmt.Sprintf("cannot compare Kubernetes %s with the range of platform %s (%s): %v", server, rel.Version, rel.Kubernetes, err),
			Remediation: fmt.Sprintf("check 'kubectl version' against the supported range %s; if you are sure the cluster qualifies, skip this check with --skip-check %s",
				rel.Kubernetes, kubernetesVersionID)}
	}
	if !ok {
		return Outcome{Result: Fail,
			Message: fmt.Sprintf("Kubernetes %s is not supported by platform %s, which supports %s", server, rel.Version, rel.Kubernetes),
			Remediation: fmt.Sprintf("upgrade (or use) a cluster whose version is in %s, or pick a platform version that supports Kubernetes %s ('onprem versions' lists each release's range)",
				rel.Kubernetes, server)}
	}
	return Passed("Kubernetes %s is within %s, the range of platform %s", server, rel.Kubernetes, rel.Version)
}
