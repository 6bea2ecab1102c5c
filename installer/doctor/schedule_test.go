package doctor

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/backup"
)

// A restore or move that stopped with the schedule suspended leaves no
// backup made until it is finished: doctor says so, and how to end it;
// while the operation runs (its lock is live) it says nothing.
func TestBackupScheduleSuspended(t *testing.T) {
	yes := true
	s := base()
	s.Namespaces["onprem"].CronJobs = []batchv1.CronJob{
		{ObjectMeta: metav1.ObjectMeta{Name: "onprem-backup", Annotations: map[string]string{backup.SuspendAnnotation: "false"}},
			Spec: batchv1.CronJobSpec{Suspend: &yes}},
		{ObjectMeta: metav1.ObjectMeta{Name: "held-by-the-operator"}, Spec: batchv1.CronJobSpec{Suspend: &yes}},
	}
	fs := only(t, Analyze(s), "backup-schedule")
	if len(fs) != 1 || fs[0].Severity != Warning || fs[0].Object != object("CronJob", "onprem", "onprem-backup") ||
		!strings.Contains(fs[0].Remediation, "onprem restore") || !strings.Contains(fs[0].Remediation, "onprem install") {
		t.Fatalf("findings: %+v", fs)
	}
	renewed := metav1.NewMicroTime(now.Add(-5 * time.Second))
	s.Namespaces["onprem"].Leases = append(s.Namespaces["onprem"].Leases, leaseOf("bob@host pid 1 (onprem 0.1.0 restore)", renewed))
	if fs := only(t, Analyze(s), "backup-schedule"); len(fs) != 0 {
		t.Errorf("while the restore runs: %+v", fs)
	}
}
