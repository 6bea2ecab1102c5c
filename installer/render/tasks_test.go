package render

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/release"
)

func renderTasks(t *testing.T, config, version string, mutate func(*Options)) *Result {
	t.Helper()
	in, _ := load(t, config)
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set.Get(version)
	if err != nil {
		t.Fatal(err)
	}
	in.Spec.Version = version
	o := Options{Installation: in, Release: rel, Tasks: true}
	if mutate != nil {
		mutate(&o)
	}
	res, err := Render(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func taskNames(res *Result) []string {
	var out []string
	for _, t := range res.Tasks {
		out = append(out, t.Kind+":"+t.Name)
	}
	return out
}

func TestTasksAreRenderedOnlyWhenAsked(t *testing.T) {
	in, rel := load(t, "minimal")
	res, err := Render(context.Background(), Options{Installation: in, Release: rel})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tasks) != 0 {
		t.Errorf("tasks rendered without Options.Tasks: %v", taskNames(res))
	}
}

func TestMigrationTasksFollowTheirService(t *testing.T) {
	res := renderTasks(t, "minimal", "2.7.0", nil)
	want := []string{"backup:onprem-backup-pipelines-api-mongodb", "migration:onprem-migration-pipelines-build-index-v2"}
	if got := taskNames(res); !slices.Equal(got, want) {
		t.Fatalf("tasks = %v, want %v (backups first)", got, want)
	}
	if p := Check(res, CheckOptions{}); len(p) != 0 {
		t.Errorf("tasks break the platform's rules: %v", p)
	}
	api := find(t, res.Component("pipelines-api"), "Deployment", "pipelines-api")
	mig := res.Tasks[1]
	if mig.Timeout.Minutes() != 15 || mig.Migration != "pipelines-build-index-v2" {
		t.Errorf("migration task = %+v", mig)
	}
	apiC := container(t, api, 0)
	migC := container(t, mig.Job, 0)
	if migC["image"] != apiC["image"] {
		t.Errorf("migration image %v, want the service's %v", migC["image"], apiC["image"])
	}
	if got := migC["args"]; !slices.Equal(toStrings(got), []string{"migrate", "--to", "2.7.0"}) {
		t.Errorf("migration args = %v", got)
	}
	if _, ok := migC["readinessProbe"]; ok {
		t.Error("migration keeps the service's probes")
	}
	if envOf(t, mig.Job)["MONGODB_PASSWORD"] != "secret:onprem-pipelines-api-mongodb/password" {
		t.Errorf("migration does not use the service's own credentials: %v", envOf(t, mig.Job))
	}
	// The task's pods must not be taken for the service's (Service, PDB
	// and ReplicaSet selectors), but keep the database client label the
	// network policies allow.
	podLabels, _, _ := unstructured.NestedStringMap(mig.Job.Object, "spec", "template", "metadata", "labels")
	sel, _, _ := unstructured.NestedStringMap(api.Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if podLabels[k] == v {
			t.Errorf("migration pod carries the service's selector label %s=%s", k, v)
		}
	}
	if podLabels["onprem.dev/client-mongodb"] != "true" || podLabels[TaskLabel] != mig.Name {
		t.Errorf("migration pod labels = %v", podLabels)
	}
	if r, _, _ := unstructured.NestedString(mig.Job.Object, "spec", "template", "spec", "restartPolicy"); r != "Never" {
		t.Errorf("restartPolicy = %q", r)
	}
	if b, _, _ := unstructured.NestedInt64(mig.Job.Object, "spec", "backoffLimit"); b != 0 {
		t.Errorf("backoffLimit = %d, want 0: a failed migration is not retried", b)
	}
	if mig.Job.GetNamespace() != res.Namespace {
		t.Errorf("task namespace = %q", mig.Job.GetNamespace())
	}

	bk := res.Tasks[0]
	bkC := container(t, bk.Job, 0)
	if !strings.HasPrefix(bkC["image"].(string), "docker.io/library/mongo:") {
		t.Errorf("backup image = %v", bkC["image"])
	}
	env := envOf(t, bk.Job)
	if env[BackupFileEnv] == "" || env["MONGODB_USERNAME"] != "secret:onprem-pipelines-api-mongodb/username" {
		t.Errorf("backup env = %v", env)
	}
	script := toStrings(bkC["command"])[2]
	if strings.Contains(script, "--password") {
		t.Error("the backup passes the password on a command line")
	}
}

func TestPostgreSQLBackupIn280(t *testing.T) {
	res := renderTasks(t, "minimal", "2.8.0", nil)
	want := []string{"backup:onprem-backup-audit-manager-postgresql", "migration:onprem-migration-audit-log-partitions"}
	if got := taskNames(res); !slices.Equal(got, want) {
		t.Fatalf("tasks = %v, want %v", got, want)
	}
	c := container(t, res.Tasks[0].Job, 0)
	if !strings.HasPrefix(c["image"].(string), "docker.io/library/postgres:") {
		t.Errorf("backup image = %v", c["image"])
	}
	if !strings.Contains(toStrings(c["command"])[2], "pg_dump") {
		t.Error("postgresql backup does not run pg_dump")
	}
}

// Tasks go through the same overlays as the components: relocation to the
// private registry, and the operator's own patches (which is how a test, or
// an operator, can annotate a migration's pod).
func TestTasksGoThroughTheOverlays(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kustomization.yaml", `apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
patches:
  - target: {kind: Job, name: onprem-migration-pipelines-build-index-v2}
    patch: |-
      - op: add
        path: /spec/template/metadata/annotations
        value: {example.org/marked: "yes"}
`)
	res := renderTasks(t, "private-registry-large", "2.7.0", func(o *Options) {
		o.Installation.Spec.Overlays = []string{dir}
	})
	for _, tk := range res.Tasks {
		img := container(t, tk.Job, 0)["image"].(string)
		if !strings.HasPrefix(img, "registry.airgap.internal:5000/onprem/") {
			t.Errorf("%s: image %s not relocated", tk.Name, img)
		}
	}
	mig := res.Tasks[len(res.Tasks)-1]
	if v, _, _ := unstructured.NestedString(mig.Job.Object, "spec", "template", "metadata", "annotations", "example.org/marked"); v != "yes" {
		t.Error("operator overlay not applied to the migration Job")
	}
	for _, c := range res.Components {
		for _, o := range c.Objects {
			if o.GetLabels()[TaskLabel] != "" {
				t.Errorf("task object %s/%s leaked into component %s", o.GetKind(), o.GetName(), c.Name)
			}
		}
	}
}

func TestMigrationOfADisabledServiceIsSkipped(t *testing.T) {
	res := renderTasks(t, "minimal", "2.7.0", func(o *Options) {
		f := false
		o.Installation.Spec.Modules.Pipelines.Enabled = &f
	})
	if len(res.Tasks) != 0 {
		t.Errorf("tasks for a service that is not installed: %v", taskNames(res))
	}
}

func TestTaskNamesFitALabel(t *testing.T) {
	n := TaskName(TaskMigration, strings.Repeat("x", 80))
	if len(n) > 63 || n != TaskName(TaskMigration, strings.Repeat("x", 80)) {
		t.Errorf("TaskName = %q (%d)", n, len(n))
	}
	if TaskName(TaskMigration, strings.Repeat("x", 80)) == TaskName(TaskMigration, strings.Repeat("x", 79)+"y") {
		t.Error("distinct long names collide")
	}
}

func container(t *testing.T, o *unstructured.Unstructured, i int) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if len(cs) <= i {
		t.Fatalf("%s: no container %d", o.GetName(), i)
	}
	return cs[i].(map[string]any)
}

func toStrings(v any) []string {
	var out []string
	s, _ := v.([]any)
	for _, x := range s {
		out = append(out, x.(string))
	}
	return out
}
