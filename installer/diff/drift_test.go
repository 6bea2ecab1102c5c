package diff

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func obj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: gitops-ui, labels: {app: gitops-ui}}
spec:
  replicas: 1
  template:
    metadata: {labels: {app: gitops-ui}}
    spec:
      containers:
      - name: gitops-ui
        image: quay.io/codefresh/gitops-ui:2.8.0
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
        resources: {requests: {cpu: 100m}}
`

// What differs is named as an operator names it, once each, in a stable
// order; a list whose items have unique names is matched by name.
func TestChangedFields(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(live map[string]any)
		want   []string
	}{
		{"image", func(live map[string]any) {
			cs, _, _ := unstructured.NestedSlice(live, "spec", "template", "spec", "containers")
			cs[0].(map[string]any)["image"] = "quay.io/codefresh/gitops-ui:9.9.9-nope"
			_ = unstructured.SetNestedSlice(live, cs, "spec", "template", "spec", "containers")
		}, []string{"image"}},
		{"env value, replicas and a pod label", func(live map[string]any) {
			cs, _, _ := unstructured.NestedSlice(live, "spec", "template", "spec", "containers")
			c := cs[0].(map[string]any)
			c["env"] = []any{map[string]any{"name": "B", "value": "2"}, map[string]any{"name": "A", "value": "changed"}}
			_ = unstructured.SetNestedSlice(live, cs, "spec", "template", "spec", "containers")
			_ = unstructured.SetNestedField(live, int64(3), "spec", "replicas")
			_ = unstructured.SetNestedField(live, "x", "spec", "template", "metadata", "labels", "extra")
		}, []string{"replicas", "pod labels", "env"}},
		{"a label of the object", func(live map[string]any) {
			_ = unstructured.SetNestedField(live, "other", "metadata", "labels", "app")
		}, []string{"labels"}},
	} {
		live := obj(t, deployment).Object
		c.change(live)
		got := changedFields(live, obj(t, deployment).Object)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	np := obj(t, `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: gitops-ui}
spec:
  podSelector: {matchLabels: {app: gitops-ui}}
  ingress: [{from: [{podSelector: {matchLabels: {app: ingress}}}]}]
`)
	opened := np.DeepCopy()
	rules, _, _ := unstructured.NestedSlice(opened.Object, "spec", "ingress")
	_ = unstructured.SetNestedSlice(opened.Object, append(rules, map[string]any{}), "spec", "ingress")
	if got := changedFields(opened.Object, np.Object); !reflect.DeepEqual(got, []string{"ingress"}) {
		t.Errorf("a NetworkPolicy opened to everyone: %v", got)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: x}\n"
	if got := changedFields(obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: y}\n").Object, obj(t, cm).Object); !reflect.DeepEqual(got, []string{"data"}) {
		t.Errorf("a ConfigMap's data: %v", got)
	}
	// Repeated names (two mounts of one volume) cannot hide a difference.
	mounts := func(path string) map[string]any {
		return obj(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers:
      - name: c
        volumeMounts: [{name: v, mountPath: /a}, {name: v, mountPath: `+path+`}]
`).Object
	}
	if got := changedFields(mounts("/b"), mounts("/c")); !reflect.DeepEqual(got, []string{"volumeMounts"}) {
		t.Errorf("volume mounts with a repeated name: %v", got)
	}
	if got := changedFields(obj(t, deployment).Object, obj(t, deployment).Object); len(got) != 0 {
		t.Errorf("equal objects: %v", got)
	}
}

// holds clears a live object that has every value onprem sets, whatever
// else it has (defaults, others' labels); a changed, missing or added
// list item, or a Secret value that differs, is left to the API server.
func TestHolds(t *testing.T) {
	desired := obj(t, deployment)
	live := obj(t, deployment)
	live.SetLabels(map[string]string{"app": "gitops-ui", "team": "ops"})
	_ = unstructured.SetNestedField(live.Object, "Always", "spec", "template", "spec", "restartPolicy")
	_ = unstructured.SetNestedField(live.Object, int64(1), "spec", "replicas")
	if !holds(live, desired) {
		t.Error("a live object with defaults and another's label is not cleared")
	}
	changed := live.DeepCopy()
	_ = unstructured.SetNestedField(changed.Object, int64(2), "spec", "replicas")
	if holds(changed, desired) {
		t.Error("changed replicas cleared")
	}
	extra := live.DeepCopy()
	cs, _, _ := unstructured.NestedSlice(extra.Object, "spec", "template", "spec", "containers")
	c := cs[0].(map[string]any)
	c["env"] = append(c["env"].([]any), map[string]any{"name": "C", "value": "3"})
	_ = unstructured.SetNestedSlice(extra.Object, cs, "spec", "template", "spec", "containers")
	if holds(extra, desired) {
		t.Error("an added env item cleared (the API server must judge it)")
	}

	secret := obj(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: value}\n")
	liveSecret := obj(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: dmFsdWU=}\ntype: Opaque\n")
	if !holds(liveSecret, secret) {
		t.Error("a Secret whose data is the stringData is not cleared")
	}
	liveSecret.Object["data"] = map[string]any{"k": "b3RoZXI="}
	if holds(liveSecret, secret) {
		t.Error("a Secret with another value cleared")
	}
}

// untouched: onprem's apply is the last write of the object itself; a
// later (or same-second) write of another manager, or none of onprem's,
// sends it to the dry run. Status writes do not count.
func TestUntouched(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	later := metav1.NewTime(t0.Add(time.Minute))
	entry := func(manager string, op metav1.ManagedFieldsOperationType, sub string, at metav1.Time) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: sub, Time: &at}
	}
	mine := entry(FieldManager, metav1.ManagedFieldsOperationApply, "", later)
	for _, c := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    bool
	}{
		{"onprem's apply only", []metav1.ManagedFieldsEntry{mine}, true},
		{"an older write of another", []metav1.ManagedFieldsEntry{entry("kubectl-edit", metav1.ManagedFieldsOperationUpdate, "", t0), mine}, true},
		{"a later status write", []metav1.ManagedFieldsEntry{mine, entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "status", metav1.NewTime(later.Add(time.Hour)))}, true},
		{"a later write of another", []metav1.ManagedFieldsEntry{mine, entry("kubectl-set", metav1.ManagedFieldsOperationUpdate, "", metav1.NewTime(later.Add(time.Hour)))}, false},
		{"a scale in the same second", []metav1.ManagedFieldsEntry{mine, entry("kubectl", metav1.ManagedFieldsOperationUpdate, "scale", later)}, false},
		{"no apply of onprem's", []metav1.ManagedFieldsEntry{entry("kubectl-create", metav1.ManagedFieldsOperationUpdate, "", t0)}, false},
	} {
		o := obj(t, deployment)
		o.SetManagedFields(c.entries)
		if got := untouched(o); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestDriftString(t *testing.T) {
	got := Strings([]Drift{{Kind: "Deployment", Name: "gitops-ui", Fields: []string{"image", "env"}}, {Kind: "Service", Name: "gitops-ui", Deleted: true}})
	want := []string{"Deployment/gitops-ui image, env", "Service/gitops-ui (deleted)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}
