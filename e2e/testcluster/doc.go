// Package testcluster starts a real Kubernetes control plane on loopback for
// the integration ring of onprem's tests (DESIGN.md, "Tests, in three
// rings"): etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// of Kubernetes v1.36.3, with kwok as a simulated kubelet, so that
// Deployments turn Available, StatefulSets with PVCs Ready and Jobs Complete
// or Failed without any container running. Linux only.
//
//	func TestInstall(t *testing.T) {
//		c := testcluster.Start(t)            // stopped in t.Cleanup
//		cs := c.Client                       // or c.RESTConfig, c.Kubeconfig
//		...
//	}
//
// # Binaries and their cache
//
// Binaries builds the five binaries from the Go module proxy the first time
// and caches them outside the checkout, keyed by Kubernetes version:
//
//	$ONPREM_CACHE/kube/v1.36.3/          (ONPREM_CACHE defaults to /var/cache/onprem)
//	  bin/kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok
//	  bin/kwok-stages.yaml                kwok's stock stages, read from the kwok module
//	  bin/<name>.version                  the version each binary was built from
//	  src/kubernetes/, src/etcd/          generated wrapper modules (go.mod, tools.go, main.go)
//	  logs/<step>.log                     output of each go command
//	  build-times.txt                     measured build time of each binary
//	  .lock                               flock held while building
//
// A binary that is present is never rebuilt; delete it (or the folder) to
// force a build. The Go module and build caches are the machine's own.
// Measured on 2 cores with an empty build cache (modules already
// downloaded): kube-apiserver 4m35s, kube-controller-manager 2m26s,
// kube-scheduler 5s, etcd 31s, kwok 1m13s; 8m49s in all. Later runs build
// nothing, and a warm Start takes about 3.7 s (BenchmarkStart).
//
// # The simulated kubelet
//
// Start registers fake nodes (kwok-node-0, ...) and a default StorageClass
// (StorageClassName, provisioner kwok.x-k8s.io/volume: PVCs bind at once).
// kwok runs its stock stages (node-initialize, heartbeat-with-lease,
// pod-ready, pod-complete, pod-delete and the volume stages) plus two of
// this package, selected by pod annotations:
//
//	onprem.dev/fail: "true"         (AnnotationFail) the pod turns Running, then Failed;
//	onprem.dev/exit-code: "3"       (AnnotationExitCode) its containers' exit code, default 1
//	onprem.dev/never-ready: "true"  (AnnotationNeverReady) the pod runs but never turns Ready
//	onprem.dev/waiting: REASON      (AnnotationWaiting) every container waits for REASON
//	                                (ErrImagePull, CrashLoopBackOff, ...) and is never ready;
//	onprem.dev/waiting-message: M   the waiting message (what the registry answered, say);
//	onprem.dev/last-reason: Error   its last run terminated so (Error, OOMKilled), after
//	onprem.dev/restarts: "5"        restarts (default 5), with exit code onprem.dev/exit-code
//	                                (default 137)
//
// Readiness probes are not run: every other pod is Ready as soon as it is
// scheduled, and a pod owned by a Job then Succeeds.
//
// # Isolation, stopping, inspection
//
// Every cluster has its own free loopback ports and its own temporary
// folder (Cluster.Dir: pki/, etcd/, logs/<component>.log, kubeconfig), so
// several clusters can run at once in one test process. Every component
// runs in its own process group; Stop (also run by t.Cleanup) sends SIGTERM
// to each group in reverse start order and SIGKILL after a grace period,
// and the kernel kills the components if the test binary itself dies
// (Pdeathsig). To keep the folder of a cluster whose test failed, with its
// logs, etcd data and kubeconfig, run the tests with ONPREM_KEEP_CLUSTER=1;
// the test log names the folder.
package testcluster
