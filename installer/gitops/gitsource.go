package gitops

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/configrepo"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// A Git source is an Argo CD Application in the runtime's namespace, named
// after the source, that syncs a folder of a Git repository into the
// runtime's cluster. It is made the way the upstream runtime (and its CLI)
// makes one, so that the runtime's app-proxy and the platform see it as a
// Git source: in the Argo CD project named after the runtime, labelled
// LabelEntity=EntityGitSource and LabelInternal=false, in sync wave 0.
// onprem's own labels (managed-by, LabelRuntime) mark the ones it created.
const (
	LabelEntity     = "codefresh.io/entity"
	EntityGitSource = "git-source"
	LabelInternal   = "codefresh.io/internal"
	// legacyLabelGitSource marked the Git sources of onprem before they
	// followed the upstream runtime: still recognised as onprem's, and
	// converged to the upstream form by the next add.
	legacyLabelGitSource = "onprem.dev/git-source"
	// InClusterServer is Argo CD's name for the cluster it runs in.
	InClusterServer = "https://kubernetes.default.svc"
)

// AppProjects is Argo CD's AppProject resource.
var AppProjects = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}

// Applications is Argo CD's Application resource.
var Applications = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}

// GitSource is one Git source as found on the runtime's cluster.
type GitSource struct {
	Name    string `json:"name"`
	Runtime string `json:"runtime"`
	URL     string `json:"url"`
	Branch  string `json:"branch,omitempty"`
	Path    string `json:"path,omitempty"`
	// Destination is the namespace the source's objects go to.
	Destination string `json:"destination"`
	// Sync and Health are Argo CD's status of the Application, when it has
	// reported one.
	Sync   string `json:"sync,omitempty"`
	Health string `json:"health,omitempty"`
}

// GitSourceOptions is a Git source to add.
type GitSourceOptions struct {
	Runtime    string
	Name       string
	Repository config.GitRepository
	// Destination is the namespace its objects go to (default: the
	// runtime's).
	Destination string
}

func checkSource(o GitSourceOptions) error {
	if msgs := validation.IsDNS1123Label(o.Name); len(msgs) > 0 {
		return &InputError{fmt.Sprintf("git source name %q: %s (valid: a DNS label, e.g. apps)", o.Name, strings.Join(msgs, "; "))}
	}
	if o.Repository.URL == "" {
		return &InputError{"git source " + o.Name + ": --repo is required: the repository's https clone URL"}
	}
	if p := o.Repository.Path; p != "" && (path.IsAbs(p) || path.Clean(p) != p || strings.HasPrefix(p, "..")) {
		return &InputError{fmt.Sprintf("git source %s: path %q must be a clean relative folder of the repository (e.g. apps/prod)", o.Name, p)}
	}
	if o.Destination != "" {
		if msgs := validation.IsDNS1123Label(o.Destination); len(msgs) > 0 {
			return &InputError{fmt.Sprintf("git source %s: destination namespace %q: %s", o.Name, o.Destination, strings.Join(msgs, "; "))}
		}
	}
	return nil
}

// AddGitSource creates (or converges) a Git source of a runtime on cl, the
// runtime's cluster. The runtime's Git token must be accepted by the
// source's repository (checked first: a refused token creates nothing).
func AddGitSource(ctx context.Context, p *Platform, cl *kube.Cluster, o GitSourceOptions, opts Options) (*GitSource, error) {
	rec, ok := p.State.Runtimes[o.Runtime]
	if !ok {
		return nil, NotFound(p.State, o.Runtime)
	}
	if err := checkSource(o); err != nil {
		return nil, err
	}
	if cl.Server != rec.Server {
		return nil, &attachment.ConflictError{Msg: fmt.Sprintf("runtime %s runs on the cluster at %s, but the cluster given reaches %s", o.Runtime, rec.Server, cl.Server)}
	}
	token, err := readToken(ctx, cl, rec.Namespace)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", o.Runtime, err)
	}
	if token == nil {
		return nil, fmt.Errorf("runtime %s: its Git token (Secret %s) is missing: reinstall it with 'onprem runtime upgrade %s --git-token-file FILE'", o.Runtime, rec.Namespace, o.Runtime)
	}
	err = configrepo.Check(ctx, remote(o.Repository, token, opts))
	clear(token)
	if err != nil {
		return nil, fmt.Errorf("git source %s: %w", o.Name, err)
	}
	app := gitSourceApplication(o, rec.Namespace)
	dc, err := dynamic.NewForConfig(cl.Config)
	if err != nil {
		return nil, fmt.Errorf("git source %s: dynamic client: %w", o.Name, err)
	}
	api := dc.Resource(Applications).Namespace(rec.Namespace)
	cur, err := api.Get(ctx, o.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("git source %s: reading Application %s/%s: %w", o.Name, rec.Namespace, o.Name, err)
	case !onpremGitSource(cur, o.Runtime):
		return nil, &attachment.ConflictError{Msg: fmt.Sprintf("git source %s: runtime %s already has an Application %s that onprem did not create: choose another name", o.Name, o.Runtime, o.Name)}
	}
	// The runtime's project, which the upstream runtime's Git sources
	// belong to (the chart creates none).
	proj := runtimeProject(o.Runtime, rec.Namespace)
	if _, err := dc.Resource(AppProjects).Namespace(rec.Namespace).Apply(ctx, o.Runtime, proj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return nil, fmt.Errorf("git source %s: applying AppProject %s/%s: %w", o.Name, rec.Namespace, o.Runtime, err)
	}
	out, err := api.Apply(ctx, o.Name, app, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return nil, fmt.Errorf("git source %s: applying Application %s/%s: %w", o.Name, rec.Namespace, o.Name, err)
	}
	gs := fromApplication(o.Runtime, out)
	return &gs, nil
}

// gitSourceApplication is the Application of Git source o of a runtime
// whose namespace is ns, as the upstream runtime makes one: in the
// runtime's project, labelled as a Git source, not internal, sync wave 0,
// synced automatically (prune, self-heal) to the destination namespace
// (default: the runtime's) of the cluster Argo CD runs in. Only the
// repository's URL without credentials is written.
func gitSourceApplication(o GitSourceOptions, ns string) *unstructured.Unstructured {
	dest := o.Destination
	if dest == "" {
		dest = ns
	}
	rev := o.Repository.Branch
	if rev == "" {
		rev = "HEAD"
	}
	src := map[string]any{"repoURL": redactURL(o.Repository.URL), "targetRevision": rev, "path": o.Repository.Path}
	if o.Repository.Path == "" {
		src["path"] = "."
	}
	l := labels(o.Runtime)
	l[LabelEntity] = EntityGitSource
	l[LabelInternal] = "false"
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "Application",
		"metadata": map[string]any{
			"name": o.Name, "namespace": ns,
			"labels":      toAny(l),
			"annotations": map[string]any{"argocd.argoproj.io/sync-wave": "0"},
		},
		"spec": map[string]any{
			"project":     o.Runtime,
			"source":      src,
			"destination": map[string]any{"server": InClusterServer, "namespace": dest},
			"syncPolicy": map[string]any{
				"automated":   map[string]any{"prune": true, "selfHeal": true},
				"syncOptions": []any{"CreateNamespace=true"},
			},
		},
	}}
}

// runtimeProject is the Argo CD project named after the runtime, in its
// namespace, that its Git sources belong to, as the upstream runtime has
// it: any repository, any namespace of the cluster Argo CD runs in, and
// the cluster-scoped kinds a Git source may hold (a source is the
// operator's own deployment, as with the upstream runtime).
func runtimeProject(runtime, ns string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "AppProject",
		"metadata":   map[string]any{"name": runtime, "namespace": ns, "labels": toAny(labels(runtime))},
		"spec": map[string]any{
			"description":              "Git sources of runtime " + runtime + " (onprem)",
			"sourceRepos":              []any{"*"},
			"destinations":             []any{map[string]any{"server": InClusterServer, "namespace": "*"}},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
		},
	}}
}

// onpremGitSource reports an Application that onprem created as a Git
// source of runtime: a Git source by the upstream labels and onprem's, or
// one of onprem's older form.
func onpremGitSource(u *unstructured.Unstructured, runtime string) bool {
	l := u.GetLabels()
	if l[legacyLabelGitSource] == u.GetName() {
		return true
	}
	return l[LabelEntity] == EntityGitSource && l["app.kubernetes.io/managed-by"] == state.ManagedBy && l[LabelRuntime] == runtime
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func fromApplication(runtime string, u *unstructured.Unstructured) GitSource {
	str := func(fields ...string) string {
		s, _, _ := unstructured.NestedString(u.Object, fields...)
		return s
	}
	gs := GitSource{
		Name: u.GetName(), Runtime: runtime,
		URL: str("spec", "source", "repoURL"), Branch: str("spec", "source", "targetRevision"), Path: str("spec", "source", "path"),
		Destination: str("spec", "destination", "namespace"),
		Sync:        str("status", "sync", "status"), Health: str("status", "health", "status"),
	}
	if gs.Branch == "HEAD" {
		gs.Branch = ""
	}
	if gs.Path == "." {
		gs.Path = ""
	}
	return gs
}

// ListGitSources lists a runtime's Git sources on cl, sorted by name.
func ListGitSources(ctx context.Context, p *Platform, runtime string, cl *kube.Cluster) ([]GitSource, error) {
	rec, ok := p.State.Runtimes[runtime]
	if !ok {
		return nil, NotFound(p.State, runtime)
	}
	dc, err := dynamic.NewForConfig(cl.Config)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: dynamic client: %w", runtime, err)
	}
	// Every Git source of the runtime, the ones made elsewhere (the
	// platform's UI) included, and onprem's of the older form.
	out := []GitSource{}
	seen := map[string]bool{}
	for _, sel := range []string{LabelEntity + "=" + EntityGitSource, legacyLabelGitSource} {
		list, err := dc.Resource(Applications).Namespace(rec.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("runtime %s: listing its Applications in %s: %w", runtime, rec.Namespace, err)
		}
		for i := range list.Items {
			if n := list.Items[i].GetName(); !seen[n] {
				seen[n] = true
				out = append(out, fromApplication(runtime, &list.Items[i]))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// RemoveGitSource deletes a runtime's Git source. It reports whether there
// was one.
func RemoveGitSource(ctx context.Context, p *Platform, runtime, name string, cl *kube.Cluster) (bool, error) {
	rec, ok := p.State.Runtimes[runtime]
	if !ok {
		return false, NotFound(p.State, runtime)
	}
	dc, err := dynamic.NewForConfig(cl.Config)
	if err != nil {
		return false, fmt.Errorf("runtime %s: dynamic client: %w", runtime, err)
	}
	api := dc.Resource(Applications).Namespace(rec.Namespace)
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("git source %s: reading Application %s/%s: %w", name, rec.Namespace, name, err)
	}
	if !onpremGitSource(cur, runtime) {
		return false, &attachment.ConflictError{Msg: fmt.Sprintf("Application %s/%s is not a Git source onprem created: remove it with kubectl if you mean to", rec.Namespace, name)}
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("git source %s: deleting Application %s/%s: %w", name, rec.Namespace, name, err)
	}
	return true, nil
}
