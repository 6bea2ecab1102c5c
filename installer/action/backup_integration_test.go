package action

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/backupstore"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/state"
)

// backedUp is an installed platform on the integration ring with records in
// the real databases that stand for its database pods.
type backedUp struct {
	c       *testcluster.Cluster
	src     Source
	cl      kube.Options
	servers *backuptest.Servers
	exec    *backuptest.Exec
	pg, mg  []string
	keys    *backupfile.KeygenResult
	records map[string]string
}

func installWithData(t *testing.T) *backedUp {
	t.Helper()
	return installWithDataOn(t, smallPlatform)
}

// installWithDataOn is installWithData with the configuration's spec body
// and the cluster's options.
func installWithDataOn(t *testing.T, body string, opts ...testcluster.Option) *backedUp {
	t.Helper()
	ctx := context.Background()
	b := &backedUp{c: testcluster.Start(t, opts...), servers: backuptest.Start(t), records: map[string]string{"build-1": "green", "build-2": "red"}}
	b.exec = backuptest.NewExec(t, b.servers)
	b.src, b.cl = clusterConfig(t, b.c, body)
	if _, err := (&Install{Source: b.src, Cluster: b.cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	dbs, err := backup.Databases(ctx, b.c.Client, "onprem")
	if err != nil {
		t.Fatal(err)
	}
	b.pg, b.mg = dbs["postgresql"], dbs["mongodb"]
	if len(b.pg) == 0 || len(b.mg) == 0 {
		t.Fatalf("the platform has no databases to back up: %v", dbs)
	}
	b.servers.Provision(t, b.pg, b.mg)
	b.servers.Write(t, b.pg, b.mg, b.records)
	if b.keys, err = backupfile.Keygen(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *backedUp) create(t *testing.T, d BackupDestination, keep int) *BackupCreateResult {
	t.Helper()
	res, err := (&BackupCreate{Target: Target{Cluster: b.cl, ConfigPath: b.src.ConfigPath}, Destination: d,
		Keys: backupfile.Keys{RecipientFiles: []string{b.keys.RecipientFile}}, Exec: b.exec, Keep: keep}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (b *backedUp) identity() backupfile.Keys {
	return backupfile.Keys{IdentityFiles: []string{b.keys.IdentityFile}}
}

func wantRecords(t *testing.T, got map[string]map[string]string, want map[string]string) {
	t.Helper()
	if len(got) == 0 {
		t.Fatal("no database read")
	}
	for db, recs := range got {
		if !reflect.DeepEqual(recs, want) {
			t.Errorf("%s holds %v, want %v", db, recs, want)
		}
	}
}

// Back up to a bucket (a real MinIO), lose the cluster, restore onto a new
// one: databases restored before any service exists, the same Secrets,
// the history carried over, every record back; then a restore killed
// midway is finished by running it again.
func TestBackupThenRestoreOntoAnEmptyCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := installWithData(t)
	s3 := testservers.StartS3(t, testservers.S3Options{TLS: true})
	dest := BackupDestination{To: "s3://" + s3.Bucket + "/prod", S3: backupstore.S3Options{Endpoint: s3.Endpoint, CAFile: s3.CAFile,
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey}}

	var names []string
	for range 3 {
		res := a.create(t, dest, 2)
		names = append(names, res.Name)
		if res.Size == 0 || len(res.Manifest.Databases()) != len(a.pg)+len(a.mg) {
			t.Fatalf("backup %s: %d bytes, databases %v", res.Name, res.Size, res.Manifest.Databases())
		}
		time.Sleep(time.Second) // names are stamped to the second
	}
	list, err := (&BackupList{Destination: dest}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Backups) != 2 || list.Backups[0].Name != names[1] || list.Backups[1].Name != names[2] {
		t.Fatalf("--keep 2 left %+v, want %s and %s", list.Backups, names[1], names[2])
	}
	st, err := state.NewStore(a.c.Client, "onprem").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := st.History[len(st.History)-1]
	if last.Kind != state.KindBackup || last.Outcome != state.OutcomeSucceeded || last.Backup == nil || last.Backup.Name != names[2] {
		t.Fatalf("the last operation recorded: %+v", last)
	}
	secretsA := generated(t, a.c.Client, "onprem")

	// The cluster is gone; a new one with new, empty database servers.
	b := testcluster.Start(t)
	servers := backuptest.Start(t)
	servers.Provision(t, a.pg, a.mg) // what db-provision's Job does on a real cluster
	exec := backuptest.NewExec(t, servers)
	var restores atomic.Int32
	exec.Before = func(target podexec.Target, cmd []string) error {
		if !strings.Contains(strings.Join(cmd, " "), "restore") && !strings.Contains(strings.Join(cmd, " "), "import_definitions") {
			return nil
		}
		restores.Add(1)
		return noServiceRuns(ctx, b.Client)
	}
	restore := &Restore{Cluster: kube.Options{Kubeconfig: b.Kubeconfig}, From: dest.To + "/" + names[2], Destination: dest,
		Keys: a.identity(), Exec: exec, Timeout: 2 * time.Minute}
	var lines []string
	restore.Progress = func(p backup.Progress) { lines = append(lines, p.Item+" "+p.Phase) }
	out, err := restore.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.Mode != RestoreEmptyCluster || out.Version != "2.8.0" || len(out.Databases) != len(a.pg)+len(a.mg) {
		t.Fatalf("restore: %+v", out)
	}
	// No runner or runtime was registered: the platform's recovery time
	// is the whole command's, nearly.
	if out.Serving <= 0 || out.Serving > out.Elapsed || out.Elapsed-out.Serving > time.Second {
		t.Errorf("the platform served again after %s of the restore's %s", out.Serving, out.Elapsed)
	}
	if n := int(restores.Load()); n != len(a.pg)+len(a.mg)+1 {
		t.Fatalf("%d restore commands ran, want one per database and RabbitMQ's definitions (%d)", n, len(a.pg)+len(a.mg)+1)
	}
	for _, want := range []string{"download done", "verify done", "postgresql/" + a.pg[0] + " done", "mongodb/" + a.mg[0] + " done", "rabbitmq/definitions done"} {
		if !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("no progress line %q in:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	wantRecords(t, servers.Read(t, a.pg, a.mg), a.records)
	if got := generated(t, b.Client, "onprem"); !reflect.DeepEqual(got, secretsA) {
		t.Errorf("the restored Secrets differ from the originals: %d vs %d", len(got), len(secretsA))
	}
	stB, err := state.NewStore(b.Client, "onprem").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	op := stB.History[len(stB.History)-1]
	if stB.Version != "2.8.0" || op.Kind != state.KindRestore || op.Outcome != state.OutcomeSucceeded || op.Backup == nil || op.Backup.Name != names[2] {
		t.Fatalf("state after the restore: version %q, last %+v", stB.Version, op)
	}
	if len(stB.History) < len(st.History)+1 || stB.History[0].ID != st.History[0].ID {
		t.Errorf("the history was not carried over: %d operations, first %s (was %d, first %s)", len(stB.History), stB.History[0].ID, len(st.History), st.History[0].ID)
	}
	status, err := (&Status{Target: Target{Cluster: kube.Options{Kubeconfig: b.Kubeconfig}, Namespace: "onprem"}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range status.Components {
		if comp.Release != "deployed" || comp.Ready != comp.Desired || len(comp.Drift) > 0 || comp.DriftError != "" {
			t.Errorf("after the restore %s: %+v", comp.Name, comp)
		}
	}
	// The backup restored from is a successful backup, and the restore
	// the newest operation.
	if b := status.Backups; b == nil || b.Last == nil || b.Last.Outcome != state.OutcomeSucceeded || b.Last.Backup == nil || b.Last.Backup.Name != names[2] {
		t.Errorf("status's last backup after the restore: %+v", status.Backups)
	}
	if lo := status.LastOperation; lo == nil || lo.Kind != state.KindRestore || lo.Outcome != state.OutcomeSucceeded {
		t.Errorf("status's last operation after the restore: %+v", status.LastOperation)
	}
	noSecretsIn(t, stB, secretsA)

	// A restore interrupted midway (the second database fails) is
	// finished by running it again, without --force.
	c := testcluster.Start(t)
	servers3 := backuptest.Start(t)
	servers3.Provision(t, a.pg, a.mg)
	exec3 := backuptest.NewExec(t, servers3)
	var n atomic.Int32
	exec3.Before = func(_ podexec.Target, cmd []string) error {
		if strings.Contains(strings.Join(cmd, " "), "pg_restore") && n.Add(1) == 2 {
			return errors.New("injected: the connection to the API server broke")
		}
		return nil
	}
	again := &Restore{Cluster: kube.Options{Kubeconfig: c.Kubeconfig}, From: dest.To + "/" + names[2], Destination: dest, Keys: a.identity(), Exec: exec3, Timeout: 2 * time.Minute}
	if _, err := again.Run(ctx); err == nil || !strings.Contains(err.Error(), "run the same restore again") {
		t.Fatalf("an interrupted restore: %v", err)
	}
	if _, err := again.Run(ctx); err != nil {
		t.Fatalf("running the interrupted restore again: %v", err)
	}
	wantRecords(t, servers3.Read(t, a.pg, a.mg), a.records)
}

// noServiceRuns fails when a Deployment other than the ingress
// controller's exists: the services must start after their data is back.
func noServiceRuns(ctx context.Context, c kubernetes.Interface) error {
	deps, err := c.AppsV1().Deployments("onprem").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, d := range deps.Items {
		if d.Labels["onprem.dev/component"] != "ingress" {
			return fmt.Errorf("deployment %s exists while a database is being restored", d.Name)
		}
	}
	return nil
}

// noSecretsIn fails when a secret value is in the state record.
func noSecretsIn(t *testing.T, st *state.State, secrets map[string]map[string][]byte) {
	t.Helper()
	data, _ := json.Marshal(st)
	for name, kv := range secrets {
		for k, v := range kv {
			if len(v) >= 16 && bytes.Contains(data, v) {
				t.Errorf("the value of %s/%s is in the state record", name, k)
			}
		}
	}
}

// A restore into a running platform needs --force and a confirmation;
// with both it replaces the databases' contents and brings the services
// back. Bad backups are refused before anything changes, and a backup
// waits for the installation's lock.
func TestRestoreInPlaceAndRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := installWithData(t)
	dir := t.TempDir()
	res := a.create(t, BackupDestination{To: dir}, 0)
	file := filepath.Join(dir, res.Name)

	before, err := state.NewStore(a.c.Client, "onprem").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(name string, r *Restore, want string) {
		t.Helper()
		r.Exec = a.exec
		if r.Cluster.Kubeconfig == "" {
			r.Cluster = a.cl
		}
		_, err := r.Run(ctx)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an input error saying %q", name, err, want)
		}
	}
	refuse("a live platform", &Restore{From: file, Keys: a.identity()}, "--force")
	refuse("--force without confirmation", &Restore{From: file, Keys: a.identity(), Force: true}, "--yes")

	other, err := backupfile.Keygen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	refuse("another key", &Restore{From: file, Keys: backupfile.Keys{IdentityFiles: []string{other.IdentityFile}}, Force: true, Confirmed: true}, "another key")
	data, _ := os.ReadFile(file)
	truncated := filepath.Join(t.TempDir(), res.Name)
	os.WriteFile(truncated, data[:len(data)*2/3], 0o600)
	refuse("a truncated file", &Restore{From: truncated, Keys: a.identity(), Force: true, Confirmed: true}, "truncated")
	flipped := filepath.Join(t.TempDir(), res.Name)
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 0x40
	os.WriteFile(flipped, bad, 0o600)
	refuse("a flipped byte", &Restore{From: flipped, Keys: a.identity(), Force: true, Confirmed: true}, "changed")
	newer := craftBackup(t, a.keys.RecipientFile, backupfile.Header{Installation: "onprem", Namespace: "onprem", Version: "9.9.9", Installer: "9.0.0"})
	refuse("a newer platform", &Restore{From: newer, Keys: a.identity(), Force: true, Confirmed: true}, "does not know")
	refuse("no such backup", &Restore{From: filepath.Join(dir, "onprem-20200101T000000Z.onprem-backup"), Keys: a.identity()}, res.Name)

	after, err := state.NewStore(a.c.Client, "onprem").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.History) != len(before.History) {
		t.Fatalf("a refused restore changed the history: %d → %d operations", len(before.History), len(after.History))
	}

	// The lock: a backup waits for another onprem, then names it.
	lock, err := state.Acquire(ctx, a.c.Client, "onprem", state.LockOptions{Holder: "upgrade by ops@build-7"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&BackupCreate{Target: Target{Cluster: a.cl, Namespace: "onprem"}, Destination: BackupDestination{To: dir},
		Keys: backupfile.Keys{RecipientFiles: []string{a.keys.RecipientFile}}, Exec: a.exec, LockWait: time.Second}).Run(ctx)
	var held *state.HeldError
	if !errors.As(err, &held) || !strings.Contains(err.Error(), "ops@build-7") {
		t.Fatalf("a backup under another's lock: %v", err)
	}
	lock.Release(ctx)

	// A lost volume: the records are gone; restore in place.
	a.servers.Lose(t, a.pg, a.mg)
	out, err := (&Restore{Cluster: a.cl, From: file, Keys: a.identity(), Force: true, Confirmed: true, Exec: a.exec, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.Mode != RestoreInPlace {
		t.Fatalf("mode %s", out.Mode)
	}
	wantRecords(t, a.servers.Read(t, a.pg, a.mg), a.records)
	deps, err := a.c.Client.AppsV1().Deployments("onprem").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if _, ok := d.Annotations[backup.ReplicasAnnotation]; ok || d.Spec.Replicas == nil || *d.Spec.Replicas == 0 || d.Status.AvailableReplicas == 0 {
			t.Errorf("deployment %s after the restore: replicas %v, available %d, annotations %v", d.Name, d.Spec.Replicas, d.Status.AvailableReplicas, d.Annotations)
		}
	}
	if _, err := a.c.Client.BatchV1().Jobs("onprem").Get(ctx, "onprem-restore-db-provision", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the restore's provisioning Job is left: %v", err)
	}
	st, _ := state.NewStore(a.c.Client, "onprem").Load(ctx)
	if op := st.History[len(st.History)-1]; op.Kind != state.KindRestore || op.Outcome != state.OutcomeSucceeded || st.Version != "2.8.0" {
		t.Fatalf("the last operation: %+v", op)
	}
}

// craftBackup writes a backup made by a newer onprem, of a platform this one
// does not know.
func craftBackup(t *testing.T, recipientFile string, h backupfile.Header) string {
	t.Helper()
	rcp, err := backupfile.Keys{RecipientFiles: []string{recipientFile}}.EncryptTo()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "onprem-20990101T000000Z.onprem-backup")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := backupfile.NewWriter(f, rcp, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []backupfile.Entry{{Name: "config/onprem.yaml", Kind: backupfile.KindConfig}, {Name: "state.json", Kind: backupfile.KindState},
		{Name: "secrets.json", Kind: backupfile.KindSecrets}, {Name: "registrations.json", Kind: backupfile.KindRegistrations}} {
		content := "{}"
		if e.Kind == backupfile.KindSecrets {
			content = "[]"
		}
		if e.Kind == backupfile.KindConfig {
			content = "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 9.9.9\n  domain: ci.example.com\n"
		}
		if _, err := w.Add(e, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// spec.backup makes install create the CronJob, with the least privileges
// it needs; a scheduled backup that fails, even before it could record
// itself, shows in status.
func TestScheduledBackupShowsInStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testcluster.Start(t)
	src, cl := clusterConfig(t, c, smallPlatform+`  backup:
    schedule: "0 3 * * *"
    timeZone: Europe/Berlin
    s3:
      endpoint: https://minio.example.com:9000
      bucket: backups
      prefix: ci
      credentialsSecret: s3-credentials
    recipients: [age1wvt9qswx46jnegg8qfra5evxl450ur5ul2jx2gpgtay0248ykg9qsasy7p]
`)
	// The credentials the operator makes (preflight fails without them;
	// the bucket itself is not reachable from here: a warning).
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "onprem"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Secrets("onprem").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-credentials"},
		StringData: map[string]string{"accessKeyID": "key", "secretAccessKey": "secret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Preflight.Findings {
		if f.ID == "backup-destination" && (f.Result != "warn" || !strings.Contains(f.Message, "cannot reach")) {
			t.Errorf("preflight backup-destination: %+v", f)
		}
	}
	cj, err := c.Client.BatchV1().CronJobs("onprem").Get(ctx, "onprem-backup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cj.Spec.Schedule != "0 3 * * *" || cj.Spec.TimeZone == nil || *cj.Spec.TimeZone != "Europe/Berlin" {
		t.Fatalf("CronJob schedule %q, time zone %v", cj.Spec.Schedule, cj.Spec.TimeZone)
	}
	args := strings.Join(cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"backup create", "--to=s3://backups/ci", "--s3-endpoint=https://minio.example.com:9000", "--keep=7", "--trigger=schedule", "--recipient=age1wvt9"} {
		if !strings.Contains(args, want) {
			t.Errorf("the backup's arguments %q lack %q", args, want)
		}
	}
	// The Role reads Secrets by name only.
	role, err := c.Client.RbacV1().Roles("onprem").Get(ctx, "onprem-backup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") && len(r.ResourceNames) == 0 {
			t.Errorf("the backup's Role may %v every Secret", r.Verbs)
		}
		if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") {
			t.Errorf("a wildcard in the backup's Role: %+v", r)
		}
	}
	// As the backup's ServiceAccount (the scheduled run): it may read the
	// Secrets backup create reads, the record of an unfinished
	// availability move included (it refuses during one), and no other.
	for name, want := range map[string]bool{"onprem-state": true, "onprem-config": true, MoveSecret: true, "someone-elses-secret": false} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:onprem:onprem-backup",
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:onprem", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "onprem", Verb: "get", Resource: "secrets", Name: name},
		}}
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != want {
			t.Errorf("the backup's ServiceAccount may get Secret %s: %v, want %v (%s)", name, got.Status.Allowed, want, got.Status.Reason)
		}
	}
	st, err := (&Status{Target: Target{Cluster: cl, Namespace: "onprem"}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Backups == nil || st.Backups.Schedule != "0 3 * * *" || st.Backups.Failed != "" || st.Backups.Last != nil {
		t.Fatalf("status before any backup: %+v", st.Backups)
	}

	// A run that fails (what `kubectl create job --from=cronjob/...` makes,
	// with a pod that exits 1).
	tmpl := cj.Spec.JobTemplate.DeepCopy()
	if tmpl.Spec.Template.Annotations == nil {
		tmpl.Spec.Template.Annotations = map[string]string{}
	}
	tmpl.Spec.Template.Annotations[testcluster.AnnotationFail] = "true"
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "onprem-backup-manual", Namespace: "onprem", Labels: tmpl.Labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))}}, Spec: tmpl.Spec}
	if _, err := c.Client.BatchV1().Jobs("onprem").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		st, err = (&Status{Target: Target{Cluster: cl, Namespace: "onprem"}}).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Backups != nil && st.Backups.Failed != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the failed backup: %+v", st.Backups)
		}
		time.Sleep(time.Second)
	}
	if !strings.Contains(st.Backups.Failed, "onprem-backup-manual") || !strings.Contains(st.Backups.Failed, "kubectl -n onprem logs job/onprem-backup-manual") {
		t.Fatalf("status says: %s", st.Backups.Failed)
	}
}

// With spec.backup set, every upgrade step first writes a backup of the
// whole platform to the bucket, and the step's record names it.
func TestUpgradeBacksUpBeforeEachStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testcluster.Start(t)
	servers := backuptest.Start(t)
	exec := backuptest.NewExec(t, servers)
	s3 := testservers.StartS3(t, testservers.S3Options{})
	keys, err := backupfile.Keygen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	body := func(version string) string {
		return fmt.Sprintf(`  version: %s
  domain: ci.example.com
  modules:
    pipelines: {enabled: false}
  backup:
    s3:
      endpoint: %s
      bucket: %s
      prefix: upgrades
      credentialsSecret: s3-credentials
    recipients: [%s]
`, version, s3.Endpoint, s3.Bucket, keys.Recipient)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "onprem"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Secrets("onprem").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-credentials"},
		StringData: map[string]string{"accessKeyID": s3.AccessKey, "secretAccessKey": s3.SecretKey}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src, cl := clusterConfig(t, c, body("2.7.1"))
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	dbs, err := backup.Databases(ctx, c.Client, "onprem")
	if err != nil {
		t.Fatal(err)
	}
	servers.Provision(t, dbs["postgresql"], dbs["mongodb"])
	up, _ := clusterConfig(t, c, body("2.8.0"))
	res, err := (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: up, Cluster: cl}, Timeout: 2 * time.Minute, Exec: exec}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 1 || res.Steps[0].Archive == nil || res.Steps[0].Archive.Trigger != backupfile.TriggerUpgrade || res.Steps[0].Archive.Version != "2.7.1" {
		t.Fatalf("the step's backup: %+v", res.Steps)
	}
	list, err := (&BackupList{Destination: BackupDestination{To: "s3://" + s3.Bucket + "/upgrades",
		S3: backupstore.S3Options{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey}}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Backups) != 1 || list.Backups[0].Name != res.Steps[0].Archive.Name {
		t.Fatalf("the bucket holds %+v, want the step's backup %s", list.Backups, res.Steps[0].Archive.Name)
	}
	st, _ := state.NewStore(c.Client, "onprem").Load(ctx)
	if op := st.History[len(st.History)-1]; op.Kind != state.KindUpgrade || op.Steps[0].Archive == nil {
		t.Fatalf("the upgrade's record: %+v", op)
	}
}
