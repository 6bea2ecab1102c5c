//go:build linux

package topology_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
)

// podSpec is how pod name of StatefulSet set runs on this machine at ip:
// the first container's command and environment as the kubelet would give
// them (with a PATH, LANG and HOME as an image gives them), its volumes
// (a data volume that outlives the process, as the member's volume does;
// ConfigMaps and Secrets as files; subPath mounts as their folder), and
// the ServiceAccount's token. Callers add what their program needs to
// share this machine's network with the other members.
func podSpec(t *testing.T, c *testcluster.Cluster, ns, set, name, ip string) testservers.PodSpec {
	t.Helper()
	return podContainers(t, c, ns, set, name, ip)[0]
}

// podContainers is podSpec for every container of the pod, in the pod's
// order, sharing its volumes' folders (named <pod>-<container> when the
// pod has more than one).
func podContainers(t *testing.T, c *testcluster.Cluster, ns, set, name, ip string) []testservers.PodSpec {
	t.Helper()
	ctx := context.Background()
	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, set, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := sts.Spec.Template.Spec
	content := map[string]string{}
	var specs []testservers.PodSpec
	for _, ctr := range pod.Containers {
		spec := containerSpec(t, c, ns, name, ip, pod, ctr, content)
		if len(pod.Containers) > 1 {
			spec.Name = name + "-" + ctr.Name
		}
		specs = append(specs, spec)
	}
	return specs
}

// containerSpec is one container of pod; content holds the folders of the
// volumes already laid out (a volume is one folder for every container).
func containerSpec(t *testing.T, c *testcluster.Cluster, ns, name, ip string, pod corev1.PodSpec, ctr corev1.Container, content map[string]string) testservers.PodSpec {
	t.Helper()
	ctx := context.Background()
	env := map[string]string{}
	expand := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand.ReplaceAllStringFunc(e.Value, func(m string) string {
				if v, ok := env[m[2:len(m)-1]]; ok {
					return v
				}
				return m
			})
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = name
			case "metadata.namespace":
				env[e.Name] = ns
			case "status.podIP":
				env[e.Name] = ip
			default:
				t.Fatalf("env %s: fieldRef %s is not known to this test", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = string(secretData(t, c.Client, ns, e.ValueFrom.SecretKeyRef.Name)[e.ValueFrom.SecretKeyRef.Key])
		default:
			t.Fatalf("env %s: a source this test does not know", e.Name)
		}
	}
	// What the image and the kubelet add.
	env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	env["LANG"] = "C.UTF-8"
	env["HOME"] = "/tmp"
	host, port, err := net.SplitHostPort(strings.TrimPrefix(c.RESTConfig.Host, "https://"))
	if err != nil {
		t.Fatalf("API server address %q: %v", c.RESTConfig.Host, err)
	}
	env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"] = host, port

	mounts := map[string]string{}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	// Each volume's content once: a volume mounted twice (whole, and one
	// file of it by subPath, or by two containers) is one folder.
	for _, m := range ctr.VolumeMounts {
		v, ok := volumes[m.Name]
		dir, seen := content[m.Name]
		switch {
		case seen:
		case m.Name == "data":
			// The member's volume: the same folder when it starts again.
			dir = testservers.EmptyDir(t)
		case !ok:
			t.Fatalf("volume mount %s names no volume", m.Name)
		case v.ConfigMap != nil:
			cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			files := map[string][]byte{}
			for k, d := range cm.Data {
				files[k] = []byte(d)
			}
			dir = testservers.WriteFiles(t, files, os.FileMode(*v.ConfigMap.DefaultMode))
		case v.Secret != nil:
			dir = testservers.WriteFiles(t, secretData(t, c.Client, ns, v.Secret.SecretName), 0o400)
		case v.EmptyDir != nil:
			dir = testservers.EmptyDir(t)
		default:
			t.Fatalf("volume %s: a source this test does not know", v.Name)
		}
		content[m.Name] = dir
		if m.SubPath == "" {
			mounts[m.MountPath] = dir
			continue
		}
		// One file by subPath: a folder of its own at the file's folder,
		// holding that file (and whatever else the caller puts there).
		parent := filepath.Dir(m.MountPath)
		if _, ok := mounts[parent]; !ok {
			mounts[parent] = testservers.EmptyDir(t)
		}
		data, err := os.ReadFile(filepath.Join(dir, m.SubPath))
		if err != nil {
			t.Fatalf("volume %s has no %s: %v", m.Name, m.SubPath, err)
		}
		if err := os.WriteFile(filepath.Join(mounts[parent], filepath.Base(m.MountPath)), data, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if pod.AutomountServiceAccountToken != nil && *pod.AutomountServiceAccountToken {
		mounts["/var/run/secrets/kubernetes.io/serviceaccount"] = serviceAccount(t, c, ns, pod.ServiceAccountName)
	}
	return testservers.PodSpec{
		Name:    name,
		Command: append(append([]string(nil), ctr.Command...), ctr.Args...),
		Env:     env,
		Mounts:  mounts,
	}
}

// serviceAccount is the folder the kubelet mounts in a pod of account sa:
// a token the API server issued for it, the cluster's CA, the namespace.
func serviceAccount(t *testing.T, c *testcluster.Cluster, ns, sa string) string {
	t.Helper()
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for ServiceAccount %s: %v", sa, err)
	}
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var ca []byte
	for _, cluster := range kc.Clusters {
		ca = cluster.CertificateAuthorityData
		if len(ca) == 0 && cluster.CertificateAuthority != "" {
			if ca, err = os.ReadFile(cluster.CertificateAuthority); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(ca) == 0 {
		t.Fatal("the kubeconfig has no CA")
	}
	return testservers.WriteFiles(t, map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte(ns)}, 0o400)
}

func ptr[T any](v T) *T { return &v }

func secretData(t *testing.T, c kubernetes.Interface, ns, name string) map[string][]byte {
	t.Helper()
	s, err := c.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret %s: %v", name, err)
	}
	return s.Data
}

// waitFor polls cond until it holds, failing with the members' logs after
// timeout or when one of them exits by itself.
func waitFor(t *testing.T, members []*testservers.Pod, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		var exited []string
		for _, m := range members {
			if m != nil && m.Exited() {
				exited = append(exited, m.Name)
			}
		}
		if len(exited) > 0 || time.Now().After(deadline) {
			var logs []string
			for _, m := range members {
				if m != nil {
					logs = append(logs, fmt.Sprintf("--- %s:\n%s", m.Name, m.LogTail(25)))
				}
			}
			sort.Strings(logs)
			t.Fatalf("waiting for %s: %v (exited: %v)\n%s", what, err, exited, strings.Join(logs, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// writer calls write with 1, 2, 3, ... every 50 ms until stopped, as a
// client of the platform does, noting which writes the database
// acknowledged (write returned nil) and how many failed.
type writer struct {
	mu       sync.Mutex
	acked    []int
	failures int
	lastAck  time.Time
	lastFail time.Time
	stop     chan struct{}
	done     chan struct{}
}

func startWriter(write func(id int) error) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for id := 1; ; id++ {
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			err := write(id)
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, id)
				w.lastAck = time.Now()
			} else {
				w.failures++
				w.lastFail = time.Now()
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// Acked is how many writes were acknowledged so far, and when the last was.
func (w *writer) Acked() (int, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked), w.lastAck
}

// Stop stops writing and returns the acknowledged ids, the failures and
// when the last failure was.
func (w *writer) Stop() (acked []int, failures int, lastFail time.Time) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.acked...), w.failures, w.lastFail
}

// missing is the ids of want that have lacks: acknowledged writes lost.
func missing(want []int, have map[int]bool) []int {
	var out []int
	for _, id := range want {
		if !have[id] {
			out = append(out, id)
		}
	}
	return out
}
