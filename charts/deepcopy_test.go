package charts

import (
	"reflect"
	"testing"

	"github.com/mitchellh/copystructure"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
)

// The fast copy gives what sprig's deepCopy (copystructure) gives for a
// template's context, and a change to the copy's maps and lists, at any
// depth, never reaches the original.
func TestCopyForTemplateIsSprigsDeepCopy(t *testing.T) {
	meta := &chartv2.Metadata{Name: "gitops-runtime", Version: "0.26.0", Annotations: map[string]string{"a": "b"}}
	ctx := common.Values{
		"Values": common.Values{
			"global": map[string]any{"codefresh": map[string]any{"url": "https://ci.example.com"}, "tolerations": []any{map[string]any{"key": "k"}, nil}},
			"list":   []any{"a", 1, 2.5, true, []any{"x"}},
			"nil":    nil,
			"empty":  map[string]any{},
		},
		"Chart":  meta,
		"Files":  testFiles{"files/a.txt": []byte("hello"), "b": nil},
		"Strs":   []string{"x", "y"},
		"Nested": map[string]map[string]any{"in": {"k": "v"}},
	}
	want, err := copystructure.Copy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := copyForTemplate(ctx)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("copy = %#v\nsprig's = %#v", got, want)
	}
	if reflect.TypeOf(got) != reflect.TypeOf(ctx) {
		t.Fatalf("copy is a %T, want %T", got, ctx)
	}
	c := got.(common.Values)
	c["Values"].(common.Values)["global"].(map[string]any)["codefresh"].(map[string]any)["url"] = "changed"
	c["Values"].(common.Values)["global"].(map[string]any)["tolerations"].([]any)[0].(map[string]any)["key"] = "changed"
	c["Values"].(common.Values)["list"].([]any)[4].([]any)[0] = "changed"
	c["Files"].(testFiles)["files/a.txt"][0] = 'J'
	c["Strs"].([]string)[0] = "changed"
	c["Nested"].(map[string]map[string]any)["in"]["k"] = "changed"
	if !reflect.DeepEqual(ctx, want) {
		t.Errorf("a change to the copy reached the original: %#v", ctx)
	}
	if copyForTemplate(nil) != nil {
		t.Error("copy of nil is not nil")
	}
}

// BenchmarkCopyForTemplate: a context holding a chart's files, the way the
// runtime chart copies `.` (sprig's copy walks every byte).
func BenchmarkCopyForTemplate(b *testing.B) {
	files := testFiles{}
	for i := range 200 {
		files[string(rune('a'+i%26))+string(rune('a'+i/26))] = make([]byte, 8<<10)
	}
	ctx := common.Values{"Values": common.Values{"a": map[string]any{"b": []any{1, 2, 3}}}, "Files": files}
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			_ = copyForTemplate(ctx)
		}
	})
	b.Run("sprig", func(b *testing.B) {
		for b.Loop() {
			if _, err := copystructure.Copy(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// testFiles is a named map of files, as Helm's engine gives templates.
type testFiles map[string][]byte
