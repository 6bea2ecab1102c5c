//go:build linux

package platform

import (
	"context"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/backupfile"
)

// rotateReplicated rotates every credential of the replicated platform
// (`onprem rotate credentials --all`: PostgreSQL's logins and admin on the
// primary, RabbitMQ's login on the cluster, Redis's password on every
// member, the services restarted onto them) under the node losses'
// traffic: records written and the services' readiness (their databases)
// asked through the ingress controller, records written to PostgreSQL
// through audit-manager, messages published with confirms. No request
// may fail; every record and every acknowledged write and message is read
// back; each new login works and each old one is refused on every member
// (a replica or a Sentinel still on the old Redis password would break the
// next failover, which the node losses after this step run).
func (e *env) rotateReplicated(ctx context.Context, records map[string]string) {
	t := e.t
	readSecret := func(name string) *corev1.Secret { return e.secret(ctx, name) }
	oldPG, oldMQ, oldRedis, oldAdmin := readSecret("onprem-audit-manager-postgresql"), readSecret("onprem-rabbitmq"),
		readSecret("onprem-redis"), readSecret("onprem-postgresql-admin")

	pg := e.startProxyWrites(ctx, "audit-manager", "rotation")
	pub := e.startPublishing("rotation")
	rt := e.startRecordTraffic(e.client, []string{"/api/readyz", "/gitops/api/readyz"},
		map[string]string{"/api/readyz": "pipelines-api", "/gitops/api/readyz": "gitops-api"})
	time.Sleep(5 * time.Second)
	t0 := time.Now()
	var creds action.RotateCredentialsResult
	// Ten services of two replicas each restart at once; on the 2-core
	// machine a replaced pod stays Terminating for minutes while
	// containerd catches up (6m was not enough there), so each workload
	// gets 15m. The bound is the machine's, not the rotation's goal.
	e.onpremJSON(&creds, "rotate", "credentials", "--all", "--namespace", namespace, "--kubeconfig", e.kubeconfig, "--timeout", "15m")
	took := time.Since(t0)
	time.Sleep(afterRotation)
	written := rt.stopWriting()
	op := "every credential rotated (availability high)"
	results := []trafficResult{rt.stop(op + ": services through the ingress")}
	pgWritten, proxy := pg.stop(op + ": PostgreSQL writes (audit-manager)")
	published, publishing := pub.stop(op + ": RabbitMQ publishes (pipelines-api)")
	results = append(results, proxy, publishing)
	var restarted []string
	switched := 0
	for _, er := range creds.Engines {
		restarted = append(restarted, er.Restarted...)
		switched += len(er.Logins)
	}
	t.Logf("rotate credentials --all (availability high): %.1f s, %d logins switched on %d engines, restarted %v", took.Seconds(), switched, len(creds.Engines), restarted)
	for _, r := range results {
		e.timing.traffic = append(e.timing.traffic, r)
		t.Logf("traffic during %s", r)
		if r.Failed > 0 || r.Sent == 0 {
			t.Fatalf("%s: %d of %d requests failed: %v", r.Operation, r.Failed, r.Sent, r.Examples)
		}
	}
	if !slices.Contains(restarted, "Deployment/audit-manager") || !slices.Contains(restarted, "Deployment/pipelines-api") {
		t.Fatalf("the rotation restarted %v, not audit-manager and pipelines-api", restarted)
	}
	e.checkRecords(ctx, records)
	e.checkWritten(written)
	e.checkProxyWritten(ctx, "audit-manager", pgWritten)
	e.checkPublished(published)
	e.oldPasswordsRefused(ctx, readSecret, oldPG, nil, oldMQ, oldRedis, oldAdmin, nil)
}

// secret reads a Secret of the platform's namespace.
func (e *env) secret(ctx context.Context, name string) *corev1.Secret {
	e.t.Helper()
	s, err := e.cluster.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// backUpReplicated backs the replicated platform up to a folder (`onprem
// backup create --include-redis`): PostgreSQL dumped on its primary with
// the admin's rotated password, RabbitMQ's definitions and Redis's data
// read from their members; then `backup inspect` opens it with the
// identity and checks every entry. MongoDB is external here: an
// operator's own, not in the platform's backup.
func (e *env) backUpReplicated() {
	t := e.t
	var keys backupfile.KeygenResult
	e.onpremJSON(&keys, "backup", "keygen", "--out", filepath.Join(e.dir, "ha-backup-keys"))
	var res action.BackupCreateResult
	e.onpremJSON(&res, "backup", "create", "--to", filepath.Join(e.dir, "ha-backups"), "--recipient-file", keys.RecipientFile,
		"--include-redis", "--kubeconfig", e.kubeconfig)
	engines := map[string]int{}
	for _, d := range res.Manifest.Databases() {
		engines[d.Engine]++
	}
	if engines["postgresql"] == 0 || res.Size == 0 {
		t.Fatalf("the backup of the replicated platform holds databases %v, %d bytes", engines, res.Size)
	}
	var kinds []string
	for _, en := range res.Manifest.Entries {
		kinds = append(kinds, en.Kind+":"+en.Engine)
	}
	t.Logf("backup %s: %d bytes, databases by engine %v, entries %v", res.Name, res.Size, engines, kinds)
	e.onprem("backup", "inspect", filepath.Join(e.dir, "ha-backups", res.Name), "--identity", keys.IdentityFile)
}
