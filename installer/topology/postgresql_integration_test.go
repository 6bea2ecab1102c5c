//go:build linux

package topology_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sethvargo/go-envconfig"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/topology"
)

// TestPatroniFailover installs the platform with spec.availability high on
// a real API server, then runs the real Patroni (Debian's) and PostgreSQL
// as the three pods of the rendered StatefulSet would: the container's own
// command and environment, its ConfigMap and Secrets mounted where the pod
// mounts them, the ServiceAccount's token, and the Role the chart grants.
// The Kubernetes API is Patroni's consensus store, as in the cluster. Then
// the primary is killed at once (a lost node) while a client writes through
// the address the Service postgresql would send it to (the leader lock's
// Endpoints): a replica takes over, every commit acknowledged before or
// during the kill is read back, topology names the new primary, and the
// killed member comes back as a replica when its "node" returns.
//
// What differs from the pods: each member listens on an address of its own
// on this machine (PATRONI_POSTGRESQL_LISTEN and PATRONI_RESTAPI_LISTEN
// override the chart's 0.0.0.0), the kubelet is kwok (the pods' objects
// exist, their containers are these processes) and PostgreSQL is Debian's.
func TestPatroniFailover(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs PostgreSQL members in mount and PID namespaces of their own, which needs root")
	}
	c := testcluster.Start(t, testcluster.WithNodes(3))
	ctx := context.Background()
	const ns = "onprem"

	dir := t.TempDir()
	cfg := filepath.Join(dir, "onprem.yaml")
	body := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n" +
		"  availability: high\n  modules:\n    pipelines: {enabled: false}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := kube.Options{Kubeconfig: c.Kubeconfig}
	// onprem's own client (no warning about the Endpoints it reads).
	kc, err := kube.Connect(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&action.Install{Source: action.Source{ConfigPath: cfg, Lookup: envconfig.MapLookuper(nil)}, Cluster: cl, Timeout: 3 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}

	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, topology.PostgreSQL, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 3 {
		t.Fatalf("StatefulSet postgresql has %d replicas, want 3", *sts.Spec.Replicas)
	}
	net3 := rand.IntN(200) + 20 // this run's addresses, apart from a parallel run's
	ips := make([]string, 3)
	members := make([]*testservers.Pod, 3)
	for i := range members {
		ips[i] = fmt.Sprintf("10.252.%d.%d", net3, i+1)
		testservers.AddAddress(t, ips[i])
		spec := podSpec(t, c, ns, fmt.Sprintf("postgresql-%d", i), ips[i])
		members[i] = testservers.StartPod(t, spec)
		// OrderedReady: the next member starts once this one runs.
		if i == 0 {
			waitFor(t, members, 3*time.Minute, "postgresql-0 the primary", func() error {
				return primaryIs(ctx, kc.Client, ns, "postgresql-0")
			})
		}
	}
	var top *topology.Topology
	waitFor(t, members, 3*time.Minute, "three members, two replicas streaming, one synchronous", func() error {
		top, err = topology.PostgreSQLCluster(ctx, kc.Client, ns)
		if err != nil {
			return err
		}
		replicas := 0
		for _, m := range top.Members {
			if m.Role == topology.RoleReplica && m.State == "running" {
				replicas++
			}
		}
		if replicas != 2 || !top.Quorum {
			return fmt.Errorf("topology: %s", top.Summary())
		}
		return nil
	})
	t.Logf("before the loss: %s", top.Summary())
	if top.Primary != "postgresql-0" || !top.Healthy() {
		t.Fatalf("topology = %+v", top)
	}

	admin := secretData(t, c.Client, ns, "onprem-postgresql-admin")
	dsn := func(ip string) string {
		return fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable&connect_timeout=2",
			url.QueryEscape(string(admin["username"])), url.QueryEscape(string(admin["password"])), net.JoinHostPort(ip, "5432"))
	}
	// The address the Service postgresql sends a client to: the leader
	// lock's Endpoints, which Patroni keeps on the primary.
	serviceAddress := func() (string, error) {
		ep, err := kc.Client.CoreV1().Endpoints(ns).Get(ctx, topology.PostgreSQL, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				return a.IP, nil
			}
		}
		return "", fmt.Errorf("Endpoints %s has no address", topology.PostgreSQL)
	}
	exec := func(sql string, args ...any) error {
		ip, err := serviceAddress()
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, dsn(ip))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(cctx, sql, args...)
		return err
	}
	if err := exec("CREATE TABLE records (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		t.Fatal(err)
	}

	// A client writes records, one connection each (as a service's pool
	// reconnects), noting every commit the server acknowledged.
	var (
		mu       sync.Mutex
		acked    []int
		failures int
		lastFail time.Time
		stop     = make(chan struct{})
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		for id := 1; ; id++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			err := exec("INSERT INTO records (id) VALUES ($1)", id)
			mu.Lock()
			if err == nil {
				acked = append(acked, id)
			} else {
				failures++
				lastFail = time.Now()
			}
			mu.Unlock()
		}
	}()
	ackedNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitFor(t, members, time.Minute, "30 records written", func() error {
		if n := ackedNow(); n < 30 {
			return fmt.Errorf("%d records", n)
		}
		return nil
	})

	sync0 := ""
	for _, m := range top.Members {
		if m.Synchronous {
			sync0 = m.Name
		}
	}
	killed := time.Now()
	members[0].Kill()
	before := ackedNow()
	var newPrimary string
	waitFor(t, members[1:], 2*time.Minute, "a new primary that takes writes", func() error {
		top, err = topology.PostgreSQLCluster(ctx, kc.Client, ns)
		if err != nil {
			return err
		}
		if top.Primary == "" || top.Primary == "postgresql-0" {
			return fmt.Errorf("topology: %s", top.Summary())
		}
		if n := ackedNow(); n <= before {
			return fmt.Errorf("no write acknowledged since the kill (%d)", n)
		}
		newPrimary = top.Primary
		return nil
	})
	serving := time.Since(killed)
	close(stop)
	<-done
	mu.Lock()
	t.Logf("primary postgresql-0 killed: %s promoted (the synchronous standby was %s); writes acknowledged again after %s; %d writes failed meanwhile, the last %s after the kill",
		newPrimary, sync0, serving.Round(100*time.Millisecond), failures, lastFail.Sub(killed).Round(100*time.Millisecond))
	want := append([]int(nil), acked...)
	mu.Unlock()
	if newPrimary != sync0 {
		t.Errorf("promoted %s, but the synchronous standby was %s: only it is sure to have every commit", newPrimary, sync0)
	}

	// Every acknowledged commit is on the primary, whichever it is now (on
	// a machine this loaded, a new primary that cannot renew its lock in
	// time hands it on again: that costs time, never a commit).
	var ip string
	waitFor(t, members[1:], time.Minute, "the Service postgresql to have an address", func() error {
		ip, err = serviceAddress()
		return err
	})
	if top, err := topology.PostgreSQLCluster(ctx, kc.Client, ns); err == nil && top.Primary != newPrimary {
		t.Logf("the primary moved again, to %s (%s)", top.Primary, top.Summary())
	}
	conn, err := pgx.Connect(ctx, dsn(ip))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT id FROM records")
	if err != nil {
		t.Fatal(err)
	}
	have := map[int]bool{}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	conn.Close(ctx)
	var lost []int
	for _, id := range want {
		if !have[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes are not on the new primary: %v", len(lost), len(want), lost)
	}
	t.Logf("all %d acknowledged writes read back from %s", len(want), newPrimary)

	// The node returns: the old primary rejoins as a replica of the new one.
	members[0].Start()
	waitFor(t, members, 3*time.Minute, "postgresql-0 back as a replica", func() error {
		top, err = topology.PostgreSQLCluster(ctx, kc.Client, ns)
		if err != nil {
			return err
		}
		for _, m := range top.Members {
			if m.Name == "postgresql-0" && m.Role == topology.RoleReplica && m.State == "running" && top.Primary != "" && top.Quorum {
				return nil
			}
		}
		return fmt.Errorf("topology: %s", top.Summary())
	})
	t.Logf("after the return: %s", top.Summary())
	if !strings.HasPrefix(top.Summary(), "primary "+top.Primary+"; ") {
		t.Errorf("summary %q does not name the primary first", top.Summary())
	}
}

// podSpec is how pod name of the StatefulSet postgresql runs on this
// machine at ip: the container's command and environment as the kubelet would give
// them, and its volumes.
func podSpec(t *testing.T, c *testcluster.Cluster, ns, name, ip string) testservers.PodSpec {
	t.Helper()
	ctx := context.Background()
	set, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, topology.PostgreSQL, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := set.Spec.Template.Spec
	ctr := pod.Containers[0]
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
	bin := testservers.PostgreSQLBin(t)
	// What the image and the kubelet add.
	env["PATH"] = bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	env["LANG"] = "C.UTF-8"
	env["HOME"] = "/tmp"
	host, port, err := net.SplitHostPort(strings.TrimPrefix(c.RESTConfig.Host, "https://"))
	if err != nil {
		t.Fatalf("API server address %q: %v", c.RESTConfig.Host, err)
	}
	env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"] = host, port
	// This machine's only difference from a pod: the member's own address.
	env["PATRONI_POSTGRESQL_LISTEN"] = ip + ":5432"
	env["PATRONI_RESTAPI_LISTEN"] = ip + ":8008"

	mounts := map[string]string{}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range ctr.VolumeMounts {
		v, ok := volumes[m.Name]
		switch {
		case m.Name == "data":
			// The member's volume: the same folder when it starts again.
			mounts[m.MountPath] = testservers.EmptyDir(t)
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
			mounts[m.MountPath] = testservers.WriteFiles(t, files, os.FileMode(*v.ConfigMap.DefaultMode))
		case v.Secret != nil:
			mounts[m.MountPath] = testservers.WriteFiles(t, secretData(t, c.Client, ns, v.Secret.SecretName), 0o400)
		case v.EmptyDir != nil:
			mounts[m.MountPath] = testservers.EmptyDir(t)
		default:
			t.Fatalf("volume %s: a source this test does not know", v.Name)
		}
	}
	mounts["/var/run/secrets/kubernetes.io/serviceaccount"] = serviceAccount(t, c, ns, pod.ServiceAccountName)
	return testservers.PodSpec{
		Name:     name,
		Command:  append(append([]string(nil), ctr.Command...), ctr.Args...),
		Env:      env,
		Mounts:   mounts,
		Packages: map[string]string{"patroni": "/usr/bin/patroni"},
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

func primaryIs(ctx context.Context, c kubernetes.Interface, ns, want string) error {
	top, err := topology.PostgreSQLCluster(ctx, c, ns)
	if err != nil {
		return err
	}
	if top.Primary != want {
		return fmt.Errorf("topology: %s", top.Summary())
	}
	return nil
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
