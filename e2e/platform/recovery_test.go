//go:build linux

package platform

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"onprem.dev/onprem/e2e/kindcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/state"
)

// Disaster recovery, on the platform at version: back up to a folder and
// to a bucket (a real MinIO the pods reach), run the scheduled backup
// twice so that retention deletes the oldest, check the refusals, delete
// the kind cluster, restore onto a new one from the bucket, and read every
// record back through the services.
const (
	backupBucket = "onprem-backups"
	backupPrefix = "e2e"
	// redisKey is written to Redis before the backup and read after the
	// restore (--include-redis).
	redisKey = "onprem-e2e-recovery"
	// gitToken is the runtime's Git token (its Git server outlives the
	// lost cluster: it runs in the test).
	gitToken = "e2e-git-token-0123456789abcdef"
)

func (e *env) disasterRecovery(ctx context.Context, version, bundle string, records map[string]string) {
	t := e.t
	var (
		s3     *testservers.S3Server
		keys   backupfile.KeygenResult
		file   string
		secret map[string]map[string][]byte
	)
	dest := func() []string {
		return []string{"--s3-endpoint", s3.Endpoint, "--s3-ca-file", s3.CAFile}
	}
	bucket := func() string { return "s3://" + backupBucket + "/" + backupPrefix }

	e.step("back up to a folder and to a bucket", func() {
		hostIP, err := e.cluster.HostIP(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s3 = testservers.StartS3(t, testservers.S3Options{IP: hostIP, TLS: true, Bucket: backupBucket})
		ca, err := os.ReadFile(s3.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		e.putSecret(ctx, "onprem-backup-s3", map[string]string{"accessKeyID": s3.AccessKey, "secretAccessKey": s3.SecretKey})
		e.putSecret(ctx, "onprem-backup-ca", map[string]string{"ca.crt": string(ca)})
		e.onpremJSON(&keys, "backup", "keygen", "--out", filepath.Join(e.dir, "backup-keys"))

		cfg := e.writeConfig("onprem-backup.yaml", version, e.overlay("e2e-backup-cpu", cronJobCPUPatch))
		e.appendConfig(cfg, fmt.Sprintf(`  backup:
    schedule: "0 0 1 1 *"
    s3:
      endpoint: %s
      bucket: %s
      prefix: %s
      credentialsSecret: onprem-backup-s3
      caSecret: onprem-backup-ca
    recipients: [%s]
    keep: 2
    includeRedis: true
`, s3.Endpoint, backupBucket, backupPrefix, keys.Recipient))
		// The ring's one 2-core node now also holds a build runner (500m
		// for its engine) and a GitOps runtime on the real chart (about 1
		// CPU): preflight rightly finds the platform's worst case, its Jobs
		// and the backup's CronJob running at once beside its services,
		// short of CPU. The backups below run one Job at a time, which
		// fits; the check is skipped here, and recorded in the state.
		e.onprem("install", "-c", cfg, "--bundle", bundle, "--kubeconfig", e.kubeconfig, "--timeout", "4m", "--skip-check", "capacity")
		// The bucket is outside the cluster: the backup's pods reach it
		// (the scheduled backups below), by the policy that spec.backup's
		// endpoint opens; a service does not.
		s3Addr, err := url.Parse(s3.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		e.expectDial("pipelines-api", e.dialFromService(ctx, "pipelines-api", s3Addr.Host), nil, []string{s3Addr.Host})

		records["before-backup"] = "written before the backup at " + version
		e.putRecord(ctx, "before-backup", records["before-backup"])
		e.redis(ctx, "SET", redisKey, "kept-by-the-backup")

		var res action.BackupCreateResult
		e.onpremJSON(&res, "backup", "create", "--to", filepath.Join(e.dir, "backups"), "--recipient-file", keys.RecipientFile,
			"--include-redis", "--kubeconfig", e.kubeconfig)
		if len(res.Manifest.Databases()) < 3 || res.Size == 0 {
			t.Fatalf("the backup holds %d databases, %d bytes", len(res.Manifest.Databases()), res.Size)
		}
		file = filepath.Join(e.dir, "backups", res.Name)
		var first action.BackupCreateResult
		e.onpremJSON(&first, append([]string{"backup", "create", "--to", bucket(), "--s3-credentials-secret", "onprem-backup-s3",
			"--recipient-file", keys.RecipientFile, "--kubeconfig", e.kubeconfig}, dest()...)...)

		// The scheduled backup, twice: the CronJob's own Job template, as
		// 'kubectl create job --from=cronjob/onprem-backup' runs it.
		for i := range 2 {
			time.Sleep(time.Second) // backups are named to the second
			e.runScheduledBackup(ctx, fmt.Sprintf("onprem-backup-e2e-%d", i))
		}
		var list action.BackupListResult
		t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
		e.onpremJSON(&list, append([]string{"backup", "list", "--from", bucket()}, dest()...)...)
		if len(list.Backups) != 2 || list.Backups[0].Name == first.Name || list.Backups[1].Name == first.Name {
			t.Fatalf("after two scheduled backups with keep 2 the bucket holds %+v; the manual %s should be gone", list.Backups, first.Name)
		}
		var st action.StatusResult
		e.onpremJSON(&st, "status", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
		if b := st.Backups; b == nil || b.Last == nil || b.Last.Outcome != state.OutcomeSucceeded || b.Last.Backup == nil ||
			b.Last.Backup.Trigger != backupfile.TriggerSchedule || b.Failed != "" {
			t.Fatalf("status after the scheduled backups: %+v", st.Backups)
		}
		e.onprem(append([]string{"backup", "inspect", list.Backups[1].Name, "--from", bucket(), "--identity", keys.IdentityFile}, dest()...)...)
		secret = e.generatedSecrets(ctx)
	})

	e.step("bad backups are refused, nothing changes", func() {
		var before action.StatusResult
		e.onpremJSON(&before, "status", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var other backupfile.KeygenResult
		e.onpremJSON(&other, "backup", "keygen", "--out", filepath.Join(e.dir, "other-keys"))
		bad := func(name string, content []byte) string {
			p := filepath.Join(e.dir, "bad", name, filepath.Base(file))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, content, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		flipped := bytes.Clone(data)
		flipped[len(flipped)/2] ^= 0x01
		newer := e.newerBackup(keys.RecipientFile)
		for _, c := range []struct {
			name string
			args []string
			want string
		}{
			{"a live platform", []string{"--from", file, "--identity", keys.IdentityFile}, "--force"},
			{"a wrong key", []string{"--from", file, "--identity", other.IdentityFile, "--force", "--yes"}, "another key"},
			{"a truncated file", []string{"--from", bad("truncated", data[:len(data)/2]), "--identity", keys.IdentityFile, "--force", "--yes"}, "truncated"},
			{"a flipped byte", []string{"--from", bad("flipped", flipped), "--identity", keys.IdentityFile, "--force", "--yes"}, "changed"},
			{"a newer version", []string{"--from", newer, "--identity", keys.IdentityFile, "--force", "--yes"}, "does not know"},
		} {
			stdout, stderr, err := e.run(append([]string{"restore", "--kubeconfig", e.kubeconfig}, c.args...)...)
			if exitOf(err) != "exit 2" || !strings.Contains(stderr, c.want) {
				t.Fatalf("restore of %s: %s, want exit 2 saying %q\n%s%s", c.name, exitOf(err), c.want, stderr, stdout)
			}
		}
		var after action.StatusResult
		e.onpremJSON(&after, "status", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
		if after.LastOperation.ID != before.LastOperation.ID {
			t.Fatalf("a refused restore changed the history: last operation %s, was %s", after.LastOperation.ID, before.LastOperation.ID)
		}
	})

	e.step("lose the cluster", func() {
		if err := e.cluster.Delete(ctx); err != nil {
			t.Fatal(err)
		}
	})

	e.step("a new, empty cluster", func() { e.startCluster(ctx) })

	var res action.RestoreResult
	e.step("restore onto it from the bucket", func() {
		tokenFile := filepath.Join(e.dir, "git-token-restore")
		if err := os.WriteFile(tokenFile, []byte(gitToken), 0o600); err != nil {
			t.Fatal(err)
		}
		platformTokenFile := filepath.Join(e.dir, "platform-token-restore")
		if err := os.WriteFile(platformTokenFile, []byte(e2ePlatformToken), 0o600); err != nil {
			t.Fatal(err)
		}
		e.onpremJSON(&res, append([]string{"restore", "--from", bucket(), "--latest", "--identity", keys.IdentityFile,
			"--bundle", bundle, "--include-redis", "--git-token-file", "codefresh=" + tokenFile, "--platform-token-file", platformTokenFile,
			"--kubeconfig", e.kubeconfig, "--timeout", "8m"}, dest()...)...)
		if res.Mode != action.RestoreEmptyCluster || res.Version != version {
			t.Fatalf("restore: %+v", res)
		}
		if res.Serving <= 0 || res.Serving > res.Elapsed {
			t.Fatalf("the platform served again after %s of the restore's %s", res.Serving, res.Elapsed)
		}
		t.Logf("recovery: empty cluster to the platform serving its data in %s, to its runner and runtime installed again in %s (runners %+v, runtimes %+v)",
			res.Serving.Round(time.Second), res.Elapsed.Round(time.Second), res.Runners, res.Runtimes)
		e.timing.recovery, e.timing.recoveryAll = res.Serving, res.Elapsed
	})
	e.allReady(version)
	e.step("every record, Secret and registration is back", func() {
		e.ingressClient(ctx)
		// audit-manager runs on a worker of this cluster: the test's
		// reads of PostgreSQL through the API server need a policy.
		e.allowAPIServerProxy(ctx)
		e.checkService("/api", "pipelines-api", version, "mongodb", "redis", "rabbitmq")
		e.checkRecords(ctx, records)
		if got := e.generatedSecrets(ctx); !reflect.DeepEqual(got, secret) {
			t.Fatalf("the restored generated Secrets differ from the lost cluster's (%d vs %d)", len(got), len(secret))
		}
		if v := strings.TrimSpace(e.redis(ctx, "GET", redisKey)); v != "kept-by-the-backup" {
			t.Fatalf("Redis %s after the restore: %q", redisKey, v)
		}
		for _, a := range append(res.Runners, res.Runtimes...) {
			if a.Outcome != "installed" {
				t.Fatalf("%s after the restore: %s %s", a.Name, a.Outcome, a.Message)
			}
		}
		var runners action.RunnerListResult
		e.onpremJSON(&runners, "runner", "list", "--platform-namespace", namespace, "--kubeconfig", e.kubeconfig)
		if len(runners.Runners) != 1 || !runners.Runners[0].Ready {
			t.Fatalf("runners after the restore: %+v", runners.Runners)
		}
		var runtimes action.RuntimeListResult
		e.onpremJSON(&runtimes, "runtime", "list", "--platform-namespace", namespace, "--kubeconfig", e.kubeconfig)
		if len(runtimes.Runtimes) != 1 || !runtimes.Runtimes[0].Ready {
			t.Fatalf("runtimes after the restore: %+v", runtimes.Runtimes)
		}
		var st action.StatusResult
		e.onpremJSON(&st, "status", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
		if st.LastOperation == nil || st.LastOperation.Kind != state.KindRestore || st.LastOperation.Outcome != state.OutcomeSucceeded {
			t.Fatalf("the last operation after the restore: %+v", st.LastOperation)
		}
		// The backup it was restored from is a successful backup (its
		// record was copied while it ran).
		if b := st.Backups; b == nil || b.Last == nil || b.Last.Outcome != state.OutcomeSucceeded || b.Last.Backup == nil || b.Last.Backup.Name != res.Backup {
			t.Fatalf("status's last backup after restoring %s: %+v", res.Backup, st.Backups)
		}
		out := e.onprem("status", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
		mustContain(t, out, "last backup: "+res.Backup, "succeeded")
		// The scheduled backup, installed once the data was back, runs on
		// its schedule (not left suspended by the restore).
		cj, err := e.cluster.Client.BatchV1().CronJobs(namespace).Get(ctx, "onprem-backup", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the scheduled backup after the restore: %v", err)
		}
		if _, noted := cj.Annotations[backup.SuspendAnnotation]; noted || (cj.Spec.Suspend != nil && *cj.Spec.Suspend) {
			t.Fatalf("the scheduled backup is left suspended after the restore: suspend %v, annotations %v", cj.Spec.Suspend, cj.Annotations)
		}
	})
}

// startCluster makes the test's second kind cluster, trusting the registry
// the bundles were pushed to: a control plane and haWorkers workers, whose
// loss is noticed after haNodeGrace (the high-availability step kills
// them). Clients reach the ingress controller on the control plane's
// node, which no step kills.
func (e *env) startCluster(ctx context.Context) {
	e.cluster = kindcluster.Start(e.t, kindcluster.WithStartTimeout(10*time.Minute),
		kindcluster.WithWorkers(haWorkers), kindcluster.WithNodeGracePeriod(haNodeGrace))
	e.kubeconfig = e.cluster.Kubeconfig
	if err := e.cluster.TrustRegistry(ctx, e.registry); err != nil {
		e.t.Fatal(err)
	}
	var err error
	if e.nodeIP, err = e.cluster.NodeIP(ctx, e.cluster.Name+"-control-plane"); err != nil {
		e.t.Fatal(err)
	}
}

// appendConfig adds lines to the spec of a configuration writeConfig
// wrote (spec is its last block).
func (e *env) appendConfig(path, lines string) {
	e.t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(lines); err != nil {
		e.t.Fatal(err)
	}
}

// putSecret creates a Secret the operator would make by hand.
func (e *env) putSecret(ctx context.Context, name string, data map[string]string) {
	e.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, StringData: data}
	if _, err := e.cluster.Client.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// generatedSecrets returns the values of every Secret onprem generated.
func (e *env) generatedSecrets(ctx context.Context) map[string]map[string][]byte {
	e.t.Helper()
	list, err := e.cluster.Client.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: "onprem.dev/generated=true"})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]map[string][]byte{}
	for _, s := range list.Items {
		out[s.Name] = s.Data
	}
	return out
}

// redis runs redis-cli in the Redis pod, with the password of the file
// mounted from its Secret (the environment's is stale after a rotation),
// and returns what it printed.
func (e *env) redis(ctx context.Context, args ...string) string {
	e.t.Helper()
	var out bytes.Buffer
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	target := podexec.Target{Namespace: namespace, Pod: "redis-0", Container: "redis"}
	cmd := append([]string{"sh", "-c", `REDISCLI_AUTH="$(cat /etc/redis-auth/password)" exec redis-cli --no-auth-warning "$@"`, "sh"}, args...)
	if err := ex.Exec(ctx, target, cmd, nil, &out); err != nil {
		e.t.Fatalf("redis-cli %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

// runScheduledBackup runs the CronJob's Job once and waits for it to
// succeed.
func (e *env) runScheduledBackup(ctx context.Context, name string) {
	e.t.Helper()
	jobs := e.cluster.Client.BatchV1().Jobs(namespace)
	cj, err := e.cluster.Client.BatchV1().CronJobs(namespace).Get(ctx, "onprem-backup", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("the scheduled backup's CronJob: %v", err)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: cj.Spec.JobTemplate.Labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))}},
		Spec: cj.Spec.JobTemplate.Spec}
	if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := jobs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				return true, nil
			case batchv1.JobFailed:
				return false, fmt.Errorf("job %s failed: %s %s", name, c.Reason, c.Message)
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("the scheduled backup: %v\n%s", err, e.jobLogs(ctx, name))
	}
}

// jobLogs returns the end of a Job's pods' logs.
func (e *env) jobLogs(ctx context.Context, job string) string {
	pods, err := e.cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	tail := int64(40)
	for _, p := range pods.Items {
		data, err := e.cluster.Client.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
		fmt.Fprintf(&b, "pod %s (%v):\n%s\n", p.Name, err, data)
	}
	return b.String()
}

// newerBackup writes a backup of a platform version no onprem of today
// knows, as a newer onprem would.
func (e *env) newerBackup(recipientFile string) string {
	e.t.Helper()
	rcp, err := backupfile.Keys{RecipientFiles: []string{recipientFile}}.EncryptTo()
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(e.dir, "newer", "onprem-20990101T000000Z.onprem-backup")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		e.t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	w, err := backupfile.NewWriter(f, rcp, backupfile.Header{Installation: "onprem", Namespace: namespace, Version: "9.9.9", Installer: "9.0.0"})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, en := range []struct{ name, kind, content string }{
		{"config/onprem.yaml", backupfile.KindConfig, "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 9.9.9\n  domain: " + domain + "\n"},
		{"state.json", backupfile.KindState, "{}"}, {"secrets.json", backupfile.KindSecrets, "[]"}, {"registrations.json", backupfile.KindRegistrations, "{}"},
	} {
		if _, err := w.Add(backupfile.Entry{Name: en.name, Kind: en.kind}, []byte(en.content)); err != nil {
			e.t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		e.t.Fatal(err)
	}
	return path
}
