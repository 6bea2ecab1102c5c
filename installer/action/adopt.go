package action

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/version"
)

// Adopt takes over a platform installed with plain Helm releases of the
// platform's components (same release names, in the configuration's
// namespace): it checks that every component the configuration installs
// has a deployed release of the right chart, and that every secret onprem
// would otherwise generate exists (new passwords would lock the services
// out of their data), then records the installation in the state without
// changing anything, so that it can be upgraded from then on.
type Adopt struct {
	Source
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn      *Configuration
	LockWait  time.Duration
	LockLease time.Duration
}

// AdoptedComponent is one release taken over.
type AdoptedComponent struct {
	Name     string `json:"name"`
	Chart    string `json:"chart"`
	Revision int    `json:"revision"`
}

// AdoptResult is what was recorded.
type AdoptResult struct {
	Namespace  string             `json:"namespace"`
	Version    string             `json:"version"`
	Components []AdoptedComponent `json:"components"`
	// Pending lists components onprem will install on the next install or
	// upgrade (onprem's own namespace-level objects, which plain Helm
	// installs do not have).
	Pending []string `json:"pending,omitempty"`
}

// AdoptError lists every reason the platform cannot be adopted as it is.
type AdoptError struct {
	Namespace string
	Version   string
	Problems  []string
}

func (e *AdoptError) Error() string {
	return fmt.Sprintf("cannot adopt the platform in namespace %s as version %s; nothing was recorded:\n  - %s",
		e.Namespace, e.Version, strings.Join(e.Problems, "\n  - "))
}

// Run adopts.
func (a *Adopt) Run(ctx context.Context) (*AdoptResult, error) {
	l, err := a.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	res, err := render.Render(ctx, l.RenderOptions(nil))
	if err != nil {
		return nil, err
	}
	conf := configuration(a.Conn, a.Cluster)
	cl, err := conf.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	ns := res.Namespace
	if _, err := cl.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, inputErr(fmt.Errorf("namespace %s does not exist: there is no platform to adopt there (spec.namespace or --namespace)", ns))
		}
		return nil, err
	}
	ctx, h, err := conf.lockAndLoad(ctx, ns, "adopt", a.LockWait, a.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	store, st := h.store, h.st
	if st.Version != "" {
		return nil, inputErr(fmt.Errorf("namespace %s already holds an onprem installation (platform %s): nothing to adopt; use `onprem upgrade` or `onprem install`", ns, st.Version))
	}

	releases := apply.NewHelmReleases(cl.Getter, ns, nil)
	out := &AdoptResult{Namespace: ns, Version: res.Version}
	aerr := &AdoptError{Namespace: ns, Version: res.Version}
	adopted := map[string]state.Component{}
	now := time.Now().UTC()
	for _, c := range res.Components {
		if c.Chart == "" {
			// onprem's own namespace-level objects: installed by the
			// next install or upgrade.
			out.Pending = append(out.Pending, c.Name)
			continue
		}
		want := c.Chart + "-" + c.ChartVersion
		last, err := releases.Last(ctx, c.Name)
		switch {
		case err != nil:
			return nil, fmt.Errorf("reading release %s: %w", c.Name, err)
		case last == nil:
			aerr.Problems = append(aerr.Problems, fmt.Sprintf("component %s: no Helm release named %s in namespace %s (disable it in components.%s if the platform does not run it)", c.Name, c.Name, ns, c.Name))
			continue
		case !last.Deployed:
			aerr.Problems = append(aerr.Problems, fmt.Sprintf("component %s: its release is %s, not deployed (fix it with helm first)", c.Name, last.Status))
			continue
		case last.Chart != want:
			aerr.Problems = append(aerr.Problems, fmt.Sprintf("component %s: the release runs chart %s but platform %s has %s (is spec.version the version this platform runs?)", c.Name, last.Chart, res.Version, want))
			continue
		}
		manifest, err := releases.Manifest(ctx, c.Name)
		if err != nil {
			return nil, fmt.Errorf("reading release %s: %w", c.Name, err)
		}
		if got, want := imageTags(manifest), renderedTags(c); !slices.Equal(got, want) {
			aerr.Problems = append(aerr.Problems, fmt.Sprintf("component %s: the release runs %s but platform %s has %s (is spec.version the version this platform runs?)",
				c.Name, strings.Join(got, ", "), res.Version, strings.Join(want, ", ")))
			continue
		}
		adopted[c.Name] = state.Component{Chart: c.Chart, ChartVersion: c.ChartVersion, Release: c.Name, Revision: last.Revision,
			Status: "adopted", UpdatedAt: now, DependsOn: c.DependsOn}
		out.Components = append(out.Components, AdoptedComponent{Name: c.Name, Chart: last.Chart, Revision: last.Revision})
	}
	for _, s := range res.Secrets {
		sec, err := cl.Client.CoreV1().Secrets(ns).Get(ctx, s.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			aerr.Problems = append(aerr.Problems, fmt.Sprintf("secret %s is missing: create it from the credentials the running platform uses (keys: %s); onprem would otherwise generate new ones that the data does not accept", s.Name, strings.Join(s.KeyNames(), ", ")))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading secret %s: %w", s.Name, err)
		}
		var missing []string
		for _, k := range s.KeyNames() {
			if len(sec.Data[k]) == 0 {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			aerr.Problems = append(aerr.Problems, fmt.Sprintf("secret %s has no %s", s.Name, strings.Join(missing, ", ")))
		}
	}
	if len(aerr.Problems) > 0 {
		return nil, inputErr(aerr)
	}
	host, _ := os.Hostname()
	st.Installation = l.Installation.Metadata.Name
	if err := store.Begin(ctx, st, state.Operation{Kind: state.KindAdopt, Version: res.Version, Installer: version.Version, Host: host, Components: componentNames(res)}); err != nil {
		return nil, err
	}
	st.Components = adopted
	msg := fmt.Sprintf("adopted %d Helm releases of platform %s without changing them", len(adopted), res.Version)
	if err := store.Finish(ctx, st, state.OutcomeSucceeded, msg); err != nil {
		return nil, fmt.Errorf("recording the adoption: %w", err)
	}
	return out, nil
}

// imageTags lists the name:tag (last path element) of every container
// image in a release manifest, sorted: the registry may differ between a
// plain Helm install and onprem's rendering, the images may not.
func imageTags(manifest string) []string {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return tagsOf(objs)
}

func renderedTags(c *render.Component) []string { return tagsOf(c.Objects) }

func tagsOf(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		for _, f := range []string{"initContainers", "containers"} {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", f)
			for _, ct := range cs {
				m, _ := ct.(map[string]any)
				img, _ := m["image"].(string)
				if i := strings.LastIndex(img, "/"); i >= 0 {
					img = img[i+1:]
				}
				out = append(out, img)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
