// Package kindcluster is the e2e ring's cluster harness: real kind
// clusters (Kubernetes v1.36.3 in a docker container, with a real kubelet,
// containerd, CoreDNS and kube-proxy) built and run with no container
// registry at all, for air-gapped machines. Linux only; needs root.
//
//	func TestInstall(t *testing.T) {
//		c := kindcluster.Start(t)              // deleted in t.Cleanup
//		_ = c.LoadImages(ctx, "images.tar")    // docker-archive from WriteImageArchive or docker save
//		cs := c.Client                         // or c.RESTConfig, c.Kubeconfig
//		...
//	}
//
// Ensure builds the toolchain once (host packages, dockerd, a debootstrap
// root filesystem, kind's base image, kubelet/kubeadm/kubectl/kube-proxy,
// CoreDNS, containerd 2, pause, the kind CLI, the control-plane images and
// the node image onprem.dev/kind-node:v1.36.3) and caches it in
// $ONPREM_CACHE/kind; Start calls it. The control plane's own binaries
// come from e2e/testcluster's cache. Clusters are created, listed and
// deleted with kind's Go library (sigs.k8s.io/kind/pkg/cluster, the
// CLI's version); the CLI is built for the operator's own inspection
// commands, which the log prints for a kept cluster.
//
// Every cluster's default StorageClass is StorageClassName, served by a
// provisioner that runs inside the test process: claims bind to hostPath
// volumes under VolumeRoot in the node container.
//
// ONPREM_KEEP_CLUSTER=1 keeps clusters after their tests (the log says how
// to reach them); ONPREM_SKIP_KIND=1 skips the tests that need kind.
// README.md has the cache layout, the host quirks and measured times.
package kindcluster
