package backup

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func cronJob(name string, suspend *bool, annotations map[string]string) *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "platform", Annotations: annotations},
		Spec:       batchv1.CronJobSpec{Schedule: "0 3 * * *", Suspend: suspend},
	}
}

func getCronJob(t *testing.T, c *fake.Clientset, name string) *batchv1.CronJob {
	t.Helper()
	cj, err := c.BatchV1().CronJobs("platform").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cj
}

func suspended(cj *batchv1.CronJob) bool { return cj.Spec.Suspend != nil && *cj.Spec.Suspend }

func bptr(b bool) *bool { return &b }

// While the services are stopped no scheduled backup runs (it would store
// the databases half restored); StartServices gives each CronJob its own
// suspend value back, one the operator had suspended stays suspended.
func TestStopServicesSuspendsTheScheduledBackup(t *testing.T) {
	c := fake.NewClientset(
		deployment("api", "pipelines-api", i32(2), nil),
		cronJob("onprem-backup", nil, nil),
		cronJob("held", bptr(true), nil),
	)
	if _, err := StopServices(context.Background(), c, "platform", []string{"pipelines-api"}); err != nil {
		t.Fatal(err)
	}
	for name, was := range map[string]string{"onprem-backup": "false", "held": "true"} {
		cj := getCronJob(t, c, name)
		if !suspended(cj) || cj.Annotations[SuspendAnnotation] != was {
			t.Errorf("%s after StopServices: suspend %v, note %q; want suspended, note %q", name, cj.Spec.Suspend, cj.Annotations[SuspendAnnotation], was)
		}
	}
	d := getDeployment(t, c, "api")
	// The fake has no controller: the Deployment is made available by hand.
	d.Status.UpdatedReplicas, d.Status.AvailableReplicas = 2, 2
	if _, err := c.AppsV1().Deployments("platform").UpdateStatus(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := StartServices(context.Background(), c, "platform", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"onprem-backup": false, "held": true} {
		cj := getCronJob(t, c, name)
		if suspended(cj) != want {
			t.Errorf("%s after StartServices: suspended %v, want %v", name, suspended(cj), want)
		}
		if _, ok := cj.Annotations[SuspendAnnotation]; ok {
			t.Errorf("%s: the note is still there", name)
		}
	}
}

// A run interrupted while the schedule was suspended left its note: the
// next run keeps it (the schedule's real value), not "true".
func TestStopServicesKeepsAnInterruptedRunsNote(t *testing.T) {
	c := fake.NewClientset(cronJob("onprem-backup", bptr(true), map[string]string{SuspendAnnotation: "false"}))
	if _, err := StopServices(context.Background(), c, "platform", nil); err != nil {
		t.Fatal(err)
	}
	if got := getCronJob(t, c, "onprem-backup").Annotations[SuspendAnnotation]; got != "false" {
		t.Fatalf("note %q, want the first run's \"false\"", got)
	}
	if _, err := StartServices(context.Background(), c, "platform", time.Second); err != nil {
		t.Fatal(err)
	}
	if suspended(getCronJob(t, c, "onprem-backup")) {
		t.Fatal("the schedule stays suspended after the run that finished the interrupted one")
	}
}
