package attachment

import (
	"context"
	"fmt"
	"strings"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
)

// ClusterOptions says how to reach an attachment's cluster named by ref,
// given how onprem reaches the platform's: the attachment's kubeconfig
// (default: the platform's) and context (default: that kubeconfig's
// current one). same is true when ref names the platform's own cluster
// (neither set).
func ClusterOptions(ref config.ClusterRef, platform kube.Options) (o kube.Options, same bool) {
	if ref.IsPlatformCluster() {
		return platform, true
	}
	o = kube.Options{Kubeconfig: ref.Kubeconfig, Context: ref.Context, Timeout: platform.Timeout}
	if o.Kubeconfig == "" {
		o.Kubeconfig = platform.Kubeconfig
	}
	return o, false
}

// ConnectRef reaches the cluster ref names (see ClusterOptions): the
// platform's connection itself when ref names no other cluster, else a
// new one. Its error is kube.Connect's (a *kube.UnreachableError or
// *kube.AuthError naming the kubeconfig, the context and the server), for
// the caller to say what the cluster was for: every kind of attachment
// reaches its cluster through this one function.
func ConnectRef(ctx context.Context, ref config.ClusterRef, platform kube.Options, platformCluster *kube.Cluster) (*kube.Cluster, error) {
	o, same := ClusterOptions(ref, platform)
	if same && platformCluster != nil {
		return platformCluster, nil
	}
	return kube.Connect(ctx, o)
}

// Connect is ConnectRef with its error wrapped with what the cluster is
// for ("runtime NAME", "runner NAME: its cluster (...)").
func Connect(ctx context.Context, what string, ref config.ClusterRef, platform kube.Options, platformCluster *kube.Cluster) (*kube.Cluster, error) {
	cl, err := ConnectRef(ctx, ref, platform, platformCluster)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return cl, nil
}

// DescribeRef names the cluster ref names, for messages: its kubeconfig
// and context, or "the platform's cluster".
func DescribeRef(ref config.ClusterRef) string {
	var parts []string
	if ref.Kubeconfig != "" {
		parts = append(parts, "kubeconfig "+ref.Kubeconfig)
	}
	if ref.Context != "" {
		parts = append(parts, fmt.Sprintf("context %q", ref.Context))
	}
	if len(parts) == 0 {
		return "the platform's cluster"
	}
	return strings.Join(parts, ", ")
}

// Place is where an installed attachment runs, as its record holds it.
type Place struct {
	Server, Context, Namespace string
}

// Where names the place for messages: "the cluster at SERVER (context
// "C") in namespace NS".
func (p Place) Where() string {
	s := "the cluster at " + p.Server
	if p.Context != "" {
		s += fmt.Sprintf(" (context %q)", p.Context)
	}
	return s + " in namespace " + p.Namespace
}
