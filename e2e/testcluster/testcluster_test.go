//go:build linux

package testcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const waitTimeout = 60 * time.Second

func TestBinaries(t *testing.T) {
	bins, err := Binaries(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bins.KubeAPIServer, bins.KubeControllerManager, bins.KubeScheduler} {
		out, err := exec.Command(p, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), KubeVersion) {
			t.Errorf("%s --version = %q, %v; want %s", p, out, err, KubeVersion)
		}
	}
	out, err := exec.Command(bins.Etcd, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), strings.TrimPrefix(EtcdVersion, "v")) {
		t.Errorf("etcd --version = %q, %v; want %s", out, err, EtcdVersion)
	}
	out, err = exec.Command(bins.Kwok, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), strings.TrimPrefix(KwokVersion, "v")) {
		t.Errorf("kwok --version = %q, %v; want %s", out, err, KwokVersion)
	}
	stages, err := os.ReadFile(bins.KwokStages)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete",
		"pod-delete", "pvc-provision", "pv-bind", "pvc-delete", "pv-delete"} {
		if !strings.Contains(string(stages), "name: "+name+"\n") {
			t.Errorf("%s lacks the stock stage %s", bins.KwokStages, name)
		}
	}
	// A second call is served from the cache.
	t0 := time.Now()
	binsMu.Lock()
	binsCached = nil
	binsMu.Unlock()
	if _, err := Binaries(context.Background(), t.Logf); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("cached Binaries took %s", d)
	}
}

// TestWorkloads checks that the simulated kubelet takes the usual workloads
// to their end states, on one cluster.
func TestWorkloads(t *testing.T) {
	c := Start(t)
	if c.RESTConfig == nil || c.Client == nil {
		t.Fatal("no client")
	}
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	sc, err := c.Client.StorageV1().StorageClasses().Get(context.Background(), StorageClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("StorageClass %s is not the default", StorageClassName)
	}

	t.Run("DeploymentAvailable", func(t *testing.T) {
		t.Parallel()
		ns := namespace(t, c.Client, "deploy")
		d := deployment("web", 2, nil)
		create(t, func(ctx context.Context) error {
			_, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
			return err
		})
		waitUntil(t, "Deployment web Available with 2 replicas", func(ctx context.Context) (bool, string, error) {
			d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return deploymentAvailable(d) && d.Status.AvailableReplicas == 2, fmt.Sprintf("%+v", d.Status), nil
		})
	})

	t.Run("StatefulSetWithVolumes", func(t *testing.T) {
		t.Parallel()
		ns := namespace(t, c.Client, "sts")
		replicas := int32(2)
		labels := map[string]string{"app": "db"}
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db"},
			Spec: appsv1.StatefulSetSpec{
				Replicas:    &replicas,
				ServiceName: "db",
				Selector:    &metav1.LabelSelector{MatchLabels: labels},
				Template:    podTemplate(labels, nil),
				VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
					ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceStorage: resource.MustParse("1Gi"),
						}},
					},
				}},
			},
		}
		sts.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		create(t, func(ctx context.Context) error {
			_, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
			return err
		})
		waitUntil(t, "StatefulSet db 2/2 Ready", func(ctx context.Context) (bool, string, error) {
			s, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return s.Status.ReadyReplicas == 2, fmt.Sprintf("%+v", s.Status), nil
		})
		for i := 0; i < 2; i++ {
			name := fmt.Sprintf("data-db-%d", i)
			pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
				t.Errorf("PVC %s: phase %s, volume %q; want Bound to a volume", name, pvc.Status.Phase, pvc.Spec.VolumeName)
			}
			if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != StorageClassName {
				t.Errorf("PVC %s: storage class %v, want the default %s", name, pvc.Spec.StorageClassName, StorageClassName)
			}
			pv, err := c.Client.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if pv.Status.Phase != corev1.VolumeBound {
				t.Errorf("PV %s: phase %s, want Bound", pv.Name, pv.Status.Phase)
			}
		}
	})

	t.Run("JobComplete", func(t *testing.T) {
		t.Parallel()
		ns := namespace(t, c.Client, "job")
		create(t, func(ctx context.Context) error {
			_, err := c.Client.BatchV1().Jobs(ns).Create(ctx, job("migrate", nil), metav1.CreateOptions{})
			return err
		})
		waitJob(t, c.Client, ns, "migrate", batchv1.JobComplete)
	})

	t.Run("JobFailed", func(t *testing.T) {
		t.Parallel()
		ns := namespace(t, c.Client, "jobfail")
		j := job("migrate", map[string]string{AnnotationFail: "true", AnnotationExitCode: "3"})
		create(t, func(ctx context.Context) error {
			_, err := c.Client.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{})
			return err
		})
		waitJob(t, c.Client, ns, "migrate", batchv1.JobFailed)
		pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=migrate"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 {
			t.Fatalf("%d pods, want 1 (backoffLimit 0)", len(pods.Items))
		}
		p := pods.Items[0]
		if p.Status.Phase != corev1.PodFailed || len(p.Status.ContainerStatuses) != 1 ||
			p.Status.ContainerStatuses[0].State.Terminated == nil ||
			p.Status.ContainerStatuses[0].State.Terminated.ExitCode != 3 {
			t.Errorf("pod %s: phase %s, container statuses %+v; want Failed with exit code 3", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
	})

	t.Run("DeploymentNeverReady", func(t *testing.T) {
		t.Parallel()
		ns := namespace(t, c.Client, "neverready")
		d := deployment("stuck", 1, map[string]string{AnnotationNeverReady: "true"})
		create(t, func(ctx context.Context) error {
			_, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
			return err
		})
		// The pod is taken to Running (so kwok did handle it)...
		waitUntil(t, "pod of stuck Running", func(ctx context.Context) (bool, string, error) {
			pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=stuck"})
			if err != nil {
				return false, "", err
			}
			return len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning, fmt.Sprintf("%d pods", len(pods.Items)), nil
		})
		// ...and neither it nor the Deployment turns Ready for a while.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			d, err := c.Client.AppsV1().Deployments(ns).Get(context.Background(), "stuck", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if deploymentAvailable(d) || d.Status.ReadyReplicas != 0 || d.Status.AvailableReplicas != 0 {
				t.Fatalf("Deployment stuck became ready: %+v", d.Status)
			}
			pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=stuck"})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				if podReady(&p) || p.Status.Phase != corev1.PodRunning {
					t.Fatalf("pod %s: phase %s, ready %v; want Running and not Ready", p.Name, p.Status.Phase, podReady(&p))
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
}

// TestTwoClusters runs two clusters at once and checks that they share
// nothing, and that Stop kills every process it started.
func TestTwoClusters(t *testing.T) {
	a := Start(t, WithName("alpha"))
	b := Start(t, WithName("beta"))
	if a.Dir == b.Dir || a.Kubeconfig == b.Kubeconfig || a.RESTConfig.Host == b.RESTConfig.Host {
		t.Fatalf("clusters share a folder or an address: %s %s, %s %s", a.Dir, b.Dir, a.RESTConfig.Host, b.RESTConfig.Host)
	}
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "only-in-alpha"}, Data: map[string]string{"k": "v"}}
	if _, err := a.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client.CoreV1().ConfigMaps("default").Get(ctx, "only-in-alpha", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap of alpha seen in beta: err = %v", err)
	}
	if _, err := b.Client.AppsV1().Deployments("default").Create(ctx, deployment("only-in-beta", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "Deployment only-in-beta Available in beta", func(ctx context.Context) (bool, string, error) {
		d, err := b.Client.AppsV1().Deployments("default").Get(ctx, "only-in-beta", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return deploymentAvailable(d), fmt.Sprintf("%+v", d.Status), nil
	})
	if _, err := a.Client.AppsV1().Deployments("default").Get(ctx, "only-in-beta", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment of beta seen in alpha: err = %v", err)
	}

	// Stopping alpha kills all its processes and leaves beta running.
	pids := a.PIDs()
	if len(pids) != 5 {
		t.Fatalf("alpha has %d processes, want 5: %v", len(pids), pids)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	assertDead(t, pids)
	if _, err := os.Stat(a.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("folder of alpha still there after Stop: %v", err)
	}
	if _, err := b.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("beta stopped working when alpha was stopped: %v", err)
	}
	pids = b.PIDs()
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	assertDead(t, pids)
}

// childEnv makes TestHelperChild start a cluster, print its PIDs and wait
// to be killed.
const childEnv = "TESTCLUSTER_HELPER_CHILD"

func TestHelperChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		return // only runs as the child of TestComponentsDieWithTestBinary
	}
	c := Start(t, WithName("orphan"))
	line, _ := json.Marshal(map[string]any{"dir": c.Dir, "pids": c.PIDs()})
	fmt.Printf("\nTESTCLUSTER-CHILD %s\n", line)
	time.Sleep(10 * time.Minute)
}

// TestComponentsDieWithTestBinary kills a test binary that runs a cluster
// with SIGKILL (no cleanup can run) and checks that every component dies too.
func TestComponentsDieWithTestBinary(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperChild$", "-test.v", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var child struct {
		Dir  string         `json:"dir"`
		PIDs map[string]int `json:"pids"`
	}
	sc := bufio.NewScanner(out)
	var seen []string
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "TESTCLUSTER-CHILD "); ok {
			if err := json.Unmarshal([]byte(rest), &child); err != nil {
				t.Fatal(err)
			}
			break
		}
		seen = append(seen, line)
	}
	if len(child.PIDs) != 5 {
		t.Fatalf("child printed no PIDs; its output:\n%s", strings.Join(seen, "\n"))
	}
	t.Cleanup(func() { os.RemoveAll(child.Dir) })
	for name, pid := range child.PIDs {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("%s (pid %d) not running before the kill: %v", name, pid, err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	assertDead(t, child.PIDs)
}

// BenchmarkStart measures a warm start: binaries cached, fresh etcd, until
// nodes are Ready and the default ServiceAccount exists. Stop is not timed.
func BenchmarkStart(b *testing.B) {
	if _, err := Binaries(context.Background(), b.Logf); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := Start(b)
		b.StopTimer()
		if err := c.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// assertDead waits briefly for every PID to be gone (signal 0 fails with
// ESRCH): reaping by init can take a moment for orphans.
func assertDead(t *testing.T, pids map[string]int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for name, pid := range pids {
		for {
			err := syscall.Kill(pid, 0)
			if errors.Is(err, syscall.ESRCH) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s (pid %d) still alive: kill(pid, 0) = %v", name, pid, err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func namespace(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	create(t, func(ctx context.Context) error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	})
	return name
}

func create(t *testing.T, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond every 100ms until it is true, failing the test with
// cond's last description after waitTimeout.
func waitUntil(t *testing.T, what string, cond func(context.Context) (bool, string, error)) {
	t.Helper()
	t0 := time.Now()
	var state string
	var lastErr error
	for time.Since(t0) < waitTimeout {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, s, err := cond(ctx)
		cancel()
		if err == nil && ok {
			t.Logf("%s after %.2fs", what, time.Since(t0).Seconds())
			return
		}
		state, lastErr = s, err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last state %s, error %v", waitTimeout, what, state, lastErr)
}

func waitJob(t *testing.T, cs kubernetes.Interface, ns, name string, want batchv1.JobConditionType) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("Job %s %s", name, want), func(ctx context.Context) (bool, string, error) {
		j, err := cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue && c.Type != want {
				return false, "", fmt.Errorf("job ended %s, want %s: %s", c.Type, want, c.Message)
			}
			if c.Type == want && c.Status == corev1.ConditionTrue {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%+v", j.Status), nil
	})
}

func podTemplate(labels, annotations map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Image: "registry.invalid/app:1", // never pulled: kwok runs nothing
		}}},
	}
}

func deployment(name string, replicas int32, annotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(labels, annotations),
		},
	}
}

func job(name string, annotations map[string]string) *batchv1.Job {
	backoff := int32(0)
	tmpl := podTemplate(nil, annotations)
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       batchv1.JobSpec{BackoffLimit: &backoff, Template: tmpl},
	}
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// TestBuildErrorNamesCommand checks that a failed build reports the command
// and the tail of its output.
func TestBuildErrorNamesCommand(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/go.mod", []byte("module broken\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/main.go", []byte("package main\n\nfunc main() { undefinedThing() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &builder{dir: dir, log: t.Logf}
	if err := b.setupEnv(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := b.goCmd(context.Background(), "broken", dir, nil, "build", "-o", dir+"/out", ".")
	if err == nil {
		t.Fatal("building a broken module succeeded")
	}
	for _, want := range []string{"go build -o", "undefined: undefinedThing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := os.Stat(dir + "/logs/broken.log"); err != nil {
		t.Errorf("no build log: %v", err)
	}
}
