//go:build linux

package kindcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const echoImage = "onprem.dev/echoserver:test"

// buildEchoImage builds internal/echoserver statically and packs it into a
// docker-archive holding echoImage.
func buildEchoImage(t testing.TB, ctx context.Context) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "echoserver")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./internal/echoserver")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build echoserver: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "echoserver.tar")
	if err := WriteImageArchive(archive, ImageSpec{
		Ref:        echoImage,
		Files:      []File{{Path: "/echoserver", Source: bin}},
		Entrypoint: []string{"/echoserver"},
	}); err != nil {
		t.Fatal(err)
	}
	return archive
}

func echoPod(name string, labels map[string]string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           echoImage,
				ImagePullPolicy: corev1.PullNever, // only the loaded image will do
				Args:            args,
			}},
		},
	}
}

// waitPod waits until the pod's phase satisfies done, failing the test
// (with the pod's state) on timeout or if it ends in another phase.
func waitPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name string, want corev1.PodPhase) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s: %v", name, err)
		}
		ready := want != corev1.PodRunning
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if pod.Status.Phase == want && ready {
			return pod
		}
		if pod.Status.Phase == corev1.PodFailed || (want == corev1.PodRunning && pod.Status.Phase == corev1.PodSucceeded) {
			t.Fatalf("pod %s ended %s: %s", name, pod.Status.Phase, podLogs(ctx, cs, ns, name))
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not %s after 3m: phase %s, status %+v", name, want, pod.Status.Phase, pod.Status.ContainerStatuses)
		}
		time.Sleep(time.Second)
	}
}

// podLogs returns a pod's log. It reads again for up to 10 s while the
// log is empty: CI once read an empty log of a client pod that had
// Succeeded, which its program does only after printing the body (and it
// prints a line to stderr for each retry), so the read raced the
// container's log file, not the program.
func podLogs(ctx context.Context, cs kubernetes.Interface, ns, name string) string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return "(logs: " + err.Error() + ")"
		}
		if len(b) > 0 || time.Now().After(deadline) {
			return string(b)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestKindCluster starts a real cluster and proves what e2e tests rely on:
// a locally built image loaded with LoadImages runs; a Service resolves
// through CoreDNS from another pod and answers HTTP; a claim of the
// default StorageClass binds, and what one pod writes to it another reads
// back; the released volume is cleaned up.
func TestKindCluster(t *testing.T) {
	skipUnlessKind(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	c := Start(t)
	cs := c.Client
	if c.Name == "" || len(c.Nodes) != 1 || c.Nodes[0] != c.Name+"-control-plane" {
		t.Fatalf("cluster %q has nodes %v", c.Name, c.Nodes)
	}
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil || v.GitVersion != KubeVersion {
		t.Fatalf("server version %v, %v; want %s", v, err, KubeVersion)
	}

	archive := buildEchoImage(t, ctx)
	if err := c.LoadImages(ctx, archive); err != nil {
		t.Fatal(err)
	}

	ns := "kindcluster-test"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSA(t, ctx, cs, ns)

	t.Run("ImageServiceDNS", func(t *testing.T) {
		server := echoPod("server", map[string]string{"app": "echo"}, "serve", "-addr", ":8080")
		server.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
		server.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1,
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, server, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "echo"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "echo"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, ctx, cs, ns, "server", corev1.PodRunning)

		url := fmt.Sprintf("http://echo.%s.svc.cluster.local/", ns)
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, echoPod("client", nil, "get", url), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, ctx, cs, ns, "client", corev1.PodSucceeded)
		if got := podLogs(ctx, cs, ns, "client"); !strings.Contains(got, "hello from server") {
			t.Fatalf("GET %s from a pod printed %q, want the server's greeting", url, got)
		}
	})

	t.Run("PersistentVolume", func(t *testing.T) {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "data"},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse("64Mi"),
				}},
			}, // no StorageClassName: the default one
		}
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		withData := func(p *corev1.Pod) *corev1.Pod {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
			}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
			// Not root: the provisioned folder must be writable for the
			// platform's non-root StatefulSets too.
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: new(int64(1000)), RunAsGroup: new(int64(1000))}
			return p
		}
		const text = "written by the writer pod"
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, withData(echoPod("writer", nil, "write", "/data/hello.txt", text)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, ctx, cs, ns, "writer", corev1.PodSucceeded)

		bound, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if bound.Status.Phase != corev1.ClaimBound || bound.Spec.StorageClassName == nil || *bound.Spec.StorageClassName != StorageClassName {
			t.Fatalf("claim: phase %s, class %v; want Bound to %s", bound.Status.Phase, bound.Spec.StorageClassName, StorageClassName)
		}
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, bound.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Annotations[annProvisionedBy] != ProvisionerName || pv.Spec.HostPath == nil {
			t.Fatalf("PV %s was not made by the provisioner: %+v", pv.Name, pv.Spec.PersistentVolumeSource)
		}
		// The file is really on the node, in the volume's folder.
		out, err := c.NodeExec(ctx, c.Nodes[0], nil, "cat", pv.Spec.HostPath.Path+"/hello.txt")
		if err != nil || string(out) != text {
			t.Fatalf("file on the node: %q, %v", out, err)
		}

		if _, err := cs.CoreV1().Pods(ns).Create(ctx, withData(echoPod("reader", nil, "cat", "/data/hello.txt")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, ctx, cs, ns, "reader", corev1.PodSucceeded)
		if got := podLogs(ctx, cs, ns, "reader"); got != text {
			t.Fatalf("reader pod read %q, want %q", got, text)
		}

		// Released with policy Delete: the provisioner removes the folder
		// and the PV.
		for _, p := range []string{"writer", "reader"} {
			if err := cs.CoreV1().Pods(ns).Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("PV %s still there 2m after its claim was deleted (%v)", pv.Name, err)
			}
			time.Sleep(time.Second)
		}
		if out, err := c.NodeExec(ctx, c.Nodes[0], nil, "test", "!", "-e", pv.Spec.HostPath.Path); err != nil {
			t.Fatalf("volume folder %s left on the node: %v %s", pv.Spec.HostPath.Path, err, out)
		}
	})
}

// waitSA waits for the namespace's default ServiceAccount, without which
// pods are refused.
func waitSA(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) {
	t.Helper()
	for i := 0; ; i++ {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return
		}
		if i > 60 {
			t.Fatalf("no default ServiceAccount in %s: %v", ns, err)
		}
		time.Sleep(time.Second)
	}
}

// BenchmarkStart measures a warm Start: toolchain cached, cluster created
// and ready (node Ready, CoreDNS available). Deletion is not timed.
//
//	go test ./e2e/kindcluster/ -run '^$' -bench Start -benchtime 1x
func BenchmarkStart(b *testing.B) {
	skipUnlessKind(b)
	ctx := context.Background()
	if _, err := Ensure(ctx, Options{Log: b.Logf}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := Start(b)
		b.StopTimer()
		if err := c.Delete(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
