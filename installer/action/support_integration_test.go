//go:build linux

package action

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/snapshot"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/support"
	"onprem.dev/onprem/installer/support/supporttest"
)

// The platform's operator puts things that look like secrets where a
// support bundle reads: a ConfigMap and a pod's environment.
const (
	shapedPassword = "Sh4pedPassw0rdValue"
	shapedToken    = "tok3nValueLooksRandom99"
	shapedURLPass  = "urlPassw0rdInAConnString"
)

// A healthy platform: doctor finds no error; its support bundle holds
// what support needs, and none of the cluster's secret values in any
// form. Then the platform is broken in the ways it really breaks, and
// doctor, live and offline on a bundle, names each.
func TestSupportBundleAndDoctor(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	src, cl := clusterConfig(t, c, smallPlatform)
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	target := Target{Cluster: cl, ConfigPath: src.ConfigPath}
	k := c.Client
	operatorSecrets(t, k)

	// Healthy.
	var progress []string
	var progressMu sync.Mutex // collectors report at once
	rep, err := (&Doctor{Collect: Collect{Target: target, Progress: func(r snapshot.CollectorResult) {
		progressMu.Lock()
		defer progressMu.Unlock()
		progress = append(progress, r.Name)
	}}}).Run(ctx)
	if err != nil {
		t.Fatalf("doctor on a healthy platform: %v\n%s", err, findings(rep))
	}
	if rep.HasErrors() {
		t.Fatalf("a healthy platform has error findings:\n%s", findings(rep))
	}
	for _, f := range rep.Findings {
		if f.Analyzer == "drift" {
			t.Errorf("a platform just installed has drift: %+v", f)
		}
	}
	for _, want := range []string{"state", "config", "objects", "secrets", "cluster", "helm", "health", "preflight", "attachments", "drift", "logs"} {
		if !slices.Contains(progress, want) {
			t.Errorf("no progress from collector %s: %v", want, progress)
		}
	}

	file := filepath.Join(t.TempDir(), "bundle.tar.gz")
	res, _, err := (&SupportBundle{Collect: Collect{Target: target}, Output: file}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the partial file is left: %v", err)
	}
	files := unpack(t, file)
	if res.Files != len(files) {
		t.Errorf("result says %d files, the bundle has %d", res.Files, len(files))
	}
	for _, want := range []string{"summary.txt", "index.json", "findings.json", "meta.json", "state.json", "config/onprem.yaml", "helm/releases.json",
		"cluster/nodes.json", "cluster/storageclasses.json", "cluster/persistentvolumes.json", "cluster/ingressclasses.json",
		"namespaces/onprem/pods.json", "namespaces/onprem/events.json", "namespaces/onprem/secrets.json",
		"namespaces/onprem/persistentvolumeclaims.json", "preflight.json", "health.json", "certificates.json", "drift.json"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the bundle has no %s", want)
		}
	}
	var idx support.Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	for _, e := range idx.Files {
		if _, ok := files[e.Path]; !ok || e.Describe == "" {
			t.Errorf("index entry %+v: in the bundle %v", e, ok)
		}
	}
	if len(idx.Files) != len(files)-1 {
		t.Errorf("index.json lists %d files, the bundle has %d besides it", len(idx.Files), len(files)-1)
	}
	// Helm's history, values redacted but there.
	var rels []snapshot.Release
	if err := json.Unmarshal(files["helm/releases.json"], &rels); err != nil || len(rels) < 5 {
		t.Fatalf("helm releases: %d, %v%s", len(rels), err, around(files["helm/releases.json"], err))
	}
	for _, r := range rels {
		if last := r.Last(); last == nil || last.Status != "deployed" || last.Chart == "" {
			t.Errorf("release %s: %+v", r.Name, last)
		}
	}
	// Secrets as names and keys.
	var infos []snapshot.SecretInfo
	if err := json.Unmarshal(files["namespaces/onprem/secrets.json"], &infos); err != nil || len(infos) == 0 {
		t.Fatalf("secrets.json: %v", err)
	}
	if !strings.Contains(string(files["summary.txt"]), "Findings: 0 error(s)") {
		t.Errorf("summary.txt:\n%s", files["summary.txt"])
	}
	noSecretIn(t, k, files)

	// Broken, in the ways the platform breaks.
	broken := breakPlatform(t, c)
	live, err := (&Doctor{Collect: Collect{Target: target}}).Run(ctx)
	var fe *FindingsError
	if !errors.As(err, &fe) || fe.Errors == 0 {
		t.Fatalf("doctor on a broken platform: %v", err)
	}
	for _, w := range broken {
		if f := find(live, w); f == nil {
			t.Errorf("doctor does not find %s %s %v:\n%s", w.analyzer, w.object, w.says, findings(live))
		} else if f.Remediation == "" || len(f.Evidence) == 0 {
			t.Errorf("%s: no evidence or remediation: %+v", w.analyzer, f)
		}
	}
	if t.Failed() {
		return
	}

	// The bundle of the broken platform: analyzed offline, the same
	// findings; still no secret in it.
	file2 := filepath.Join(t.TempDir(), "broken.tar.gz")
	if _, _, err := (&SupportBundle{Collect: Collect{Target: target}, Output: file2}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	offline, err := (&SupportAnalyze{File: file2}).Run(ctx)
	if !errors.As(err, &fe) {
		t.Fatalf("analyze: %v", err)
	}
	for _, w := range broken {
		if find(offline, w) == nil {
			t.Errorf("offline analysis does not find %s %s:\n%s", w.analyzer, w.object, findings(offline))
		}
	}
	files2 := unpack(t, file2)
	noSecretIn(t, k, files2)
	summary := string(files2["summary.txt"])
	for _, want := range []string{"[ERROR] image-pull", "registry.example.com/nope/pipelines:0.0.0", "fix:"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary.txt lacks %q", want)
		}
	}
}

// operatorSecrets puts secret-shaped text where the bundle reads it, and
// an operator's Secret.
func operatorSecrets(t *testing.T, k kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	_, err := k.CoreV1().ConfigMaps("onprem").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "operator-notes"},
		Data: map[string]string{"settings": "password=" + shapedPassword + "\napi_token: " + shapedToken + "\nurl: postgres://app:" + shapedURLPass + "@db.example.com:5432/app\n"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.CoreV1().Secrets("onprem").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "operator-own"},
		StringData: map[string]string{"webhook": "operatorWebhookSecretValue42"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// noSecretIn greps every file of the bundle for every secret value of the
// cluster (supporttest.Needles) and for the operator's secret-shaped text.
func noSecretIn(t *testing.T, k kubernetes.Interface, files map[string][]byte) {
	t.Helper()
	needles, generated, err := supporttest.Needles(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	if generated < 5 {
		t.Fatalf("only %d generated secret values to look for", generated)
	}
	for v, where := range map[string]string{shapedPassword: "password= pair", shapedToken: "token: pair", shapedURLPass: "URL password"} {
		needles[v] = where
	}
	leaks := supporttest.Leaks(files, needles)
	for _, l := range leaks {
		t.Error(l)
	}
	t.Logf("grep: %d values in %d files, %d hits", len(needles), len(files), len(leaks))
	if !strings.Contains(string(files["namespaces/onprem/configmaps.json"]), "<redacted>") {
		t.Errorf("the operator's ConfigMap shows no redaction")
	}
}

func unpack(t *testing.T, file string) map[string][]byte {
	t.Helper()
	files, err := support.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// wanted is a finding a broken state must produce.
type wanted struct {
	analyzer, object string
	severity         doctor.Severity
	// says are strings the title or evidence must hold.
	says []string
}

func find(rep *doctor.Report, w wanted) *doctor.Finding {
	for i, f := range rep.Findings {
		if f.Analyzer != w.analyzer || (w.object != "" && f.Object != w.object) || (w.severity != "" && f.Severity != w.severity) {
			continue
		}
		text := f.Title + "\n" + strings.Join(f.Evidence, "\n") + "\n" + f.Component
		ok := true
		for _, s := range w.says {
			ok = ok && strings.Contains(text, s)
		}
		if ok {
			return &rep.Findings[i]
		}
	}
	return nil
}

func findings(rep *doctor.Report) string {
	if rep == nil {
		return "(no report)"
	}
	var b strings.Builder
	for _, f := range rep.Findings {
		support.WriteFinding(&b, f)
	}
	return b.String()
}

// breakPlatform breaks the installed platform, each break through real
// objects of the API server (kwok's stages play the kubelet), and returns
// the findings each must produce.
func breakPlatform(t *testing.T, c *testcluster.Cluster) []wanted {
	t.Helper()
	ctx := context.Background()
	k := c.Client
	ns := "onprem"
	deps, err := k.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var services []appsv1.Deployment
	for _, d := range deps.Items {
		if strings.HasPrefix(d.Name, "pipelines") || d.Name == "ingress" || d.Labels[render.ComponentLabel] == "" {
			continue
		}
		services = append(services, d)
	}
	if len(services) < 3 {
		t.Fatalf("only %d services to break", len(services))
	}
	slices.SortFunc(services, func(a, b appsv1.Deployment) int { return strings.Compare(a.Name, b.Name) })
	pull, crash, oom := services[0], services[1], services[2]
	// Controllers write status between a read and a write: a conflict
	// means read again and change again.
	patchTemplate := func(d appsv1.Deployment, annotations map[string]string, image string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := k.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Spec.Template.Annotations == nil {
				cur.Spec.Template.Annotations = map[string]string{}
			}
			for k, v := range annotations {
				cur.Spec.Template.Annotations[k] = v
			}
			if image != "" {
				cur.Spec.Template.Spec.Containers[0].Image = image
			}
			cur.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}
			_, err = k.AppsV1().Deployments(ns).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	badImage := "registry.example.com/nope/pipelines:0.0.0"
	patchTemplate(pull, map[string]string{testcluster.AnnotationWaiting: "ImagePullBackOff",
		testcluster.AnnotationWaitingMessage: `Back-off pulling image "` + badImage + `"`}, badImage)
	patchTemplate(crash, map[string]string{testcluster.AnnotationWaiting: "CrashLoopBackOff", testcluster.AnnotationLastReason: "Error"}, "")
	patchTemplate(oom, map[string]string{testcluster.AnnotationWaiting: "CrashLoopBackOff", testcluster.AnnotationLastReason: "OOMKilled"}, "")

	// The database's pods never become ready.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pg, err := k.AppsV1().StatefulSets(ns).Get(ctx, "postgresql", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pg.Spec.Template.Annotations == nil {
			pg.Spec.Template.Annotations = map[string]string{}
		}
		pg.Spec.Template.Annotations[testcluster.AnnotationNeverReady] = "true"
		_, err = k.AppsV1().StatefulSets(ns).Update(ctx, pg, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	one := int32(1)
	labels := map[string]string{"app": "stuck"}
	_, err = k.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Labels: map[string]string{render.ComponentLabel: "stuck"}},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: restricted(corev1.PodSpec{NodeSelector: map[string]string{"disk": "nvme-that-no-node-has"}, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}})}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	missing := "fast-ssd-that-does-not-exist"
	_, err = k.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-orphan"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &missing, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zero := int32(0)
	_, err = k.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "db-provision-test"},
		Spec: batchv1.JobSpec{BackoffLimit: &zero, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{testcluster.AnnotationFail: "true"}},
			Spec: restricted(corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "provision", Image: "busybox"}}})}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An Ingress to a Service that selects no pod.
	_, err = k.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "nobody"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "nobody"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := networkingv1.PathTypePrefix
	_, err = k.NetworkingV1().Ingresses(ns).Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "nobody"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "nobody.ci.example.com", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "nobody", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A certificate that expires in three days.
	_, err = k.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "expiring-tls"}, Type: corev1.SecretTypeTLS,
		Data: expiringPair(t, "ci.example.com", 72*time.Hour)}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An upgrade whose onprem was killed: its operation still running in
	// the record, its lock left behind.
	store := state.NewStore(k, ns)
	st, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Begin(ctx, st, state.Operation{Kind: state.KindUpgrade, Version: "2.9.0", Host: "ops-laptop"}); err != nil {
		t.Fatal(err)
	}
	holder := "alice@ops-laptop pid 4242 (onprem 0.1.0 upgrade)"
	lease := int32(30)
	old := metav1.NewMicroTime(time.Now().Add(-10 * time.Minute))
	_, err = k.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: state.LeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &lease, AcquireTime: &old, RenewTime: &old}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A node under memory pressure (kwok does not manage it; a taint
	// keeps the scheduler away).
	node, err := k.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "pressed"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "test", Value: "pressed", Effect: corev1.TaintEffectNoSchedule}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The node controllers write to a new node too (taints, annotations):
	// a conflict means read it again and set the conditions once more.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if node, err = k.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Conditions = []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: "KubeletHasInsufficientMemory", Message: "kubelet has insufficient memory available", LastHeartbeatTime: now, LastTransitionTime: now},
		}
		_, err := k.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Wait for the simulated kubelet and the controllers to show it all.
	waitFor(t, 90*time.Second, func() error {
		for _, d := range []string{pull.Name, crash.Name, oom.Name} {
			if err := podWaiting(ctx, k, ns, d); err != nil {
				return err
			}
		}
		j, err := k.BatchV1().Jobs(ns).Get(ctx, "db-provision-test", metav1.GetOptions{})
		if err != nil || j.Status.Failed == 0 {
			return errors.New("the Job has not failed yet")
		}
		s, err := k.AppsV1().StatefulSets(ns).Get(ctx, "postgresql", metav1.GetOptions{})
		if err != nil || s.Status.ReadyReplicas != 0 || s.Status.UpdatedReplicas != 1 {
			return errors.New("postgresql still ready")
		}
		pods, err := k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=stuck"})
		if err != nil || len(pods.Items) == 0 || len(pods.Items[0].Status.Conditions) == 0 {
			return errors.New("the unschedulable pod has no condition yet")
		}
		return nil
	})

	return []wanted{
		{analyzer: "image-pull", severity: doctor.Error, says: []string{badImage, "registry.example.com", pull.Labels[render.ComponentLabel], "ImagePullBackOff"}},
		{analyzer: "crash-loop", severity: doctor.Error, says: []string{crash.Labels[render.ComponentLabel], "restarted 5 times", "Error"}},
		{analyzer: "oom-killed", severity: doctor.Error, says: []string{oom.Labels[render.ComponentLabel], "memory limit 512Mi"}},
		{analyzer: "component-unavailable", severity: doctor.Error, says: []string{"postgresql", "0/1 ready"}},
		{analyzer: "database-down", severity: doctor.Error, says: []string{"database postgresql is down"}},
		{analyzer: "pod-pending", severity: doctor.Error, says: []string{"stuck", "Unschedulable", "node affinity/selector"}},
		{analyzer: "pvc-pending", object: "PersistentVolumeClaim/onprem/data-orphan", severity: doctor.Error, says: []string{`no StorageClass "` + missing + `"`}},
		{analyzer: "job-failed", object: "Job/onprem/db-provision-test", severity: doctor.Error, says: []string{"database provisioning", "BackoffLimitExceeded"}},
		{analyzer: "ingress", object: "Ingress/onprem/nobody", severity: doctor.Error, says: []string{"nobody", "no ready"}},
		{analyzer: "certificate-expiry", object: "Secret/onprem/expiring-tls", severity: doctor.Error, says: []string{"ci.example.com", "expires in"}},
		{analyzer: "stale-lock", severity: doctor.Warning, says: []string{holder, "last renewed"}},
		{analyzer: "last-operation", severity: doctor.Error, says: []string{"interrupted", "upgrade 2.9.0"}},
		{analyzer: "node-pressure", object: "Node/pressed", severity: doctor.Error, says: []string{"MemoryPressure", "insufficient memory"}},
	}
}

// podWaiting says whether the newest pod of a Deployment shows a waiting
// container.
func podWaiting(ctx context.Context, k kubernetes.Interface, ns, deployment string) error {
	pods, err := k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, deployment+"-") {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil {
				return nil
			}
		}
	}
	return errors.New("no pod of " + deployment + " is waiting yet")
}

func waitFor(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", d, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// expiringPair is a self-signed certificate for host that expires in d,
// as kubernetes.io/tls data.
func expiringPair(t *testing.T, host string, d time.Duration) map[string][]byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-24 * time.Hour), NotAfter: time.Now().Add(d)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}
}

// around shows the text where JSON did not parse.
func around(b []byte, err error) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return ""
	}
	from, to := max(0, int(se.Offset)-300), min(len(b), int(se.Offset)+100)
	return "\n..." + string(b[from:to]) + "..."
}

// restricted makes a pod spec pass the platform namespace's Pod Security
// Admission (restricted).
func restricted(p corev1.PodSpec) corev1.PodSpec {
	yes, no, uid := true, false, int64(1000)
	p.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for i := range p.Containers {
		p.Containers[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
	return p
}
