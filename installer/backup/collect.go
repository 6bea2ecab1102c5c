package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
)

// ConfigSecret is the Secret of the platform namespace holding the
// effective configuration (key ConfigKey) of the last install or upgrade
// that succeeded: what a backup carries and a restore installs again. It
// holds no secret value (onprem.yaml has none); it is a Secret so that the
// same people may read it as the state.
const (
	ConfigSecret = "onprem-config"
	ConfigKey    = "onprem.yaml"
)

// Entry names inside a backup (the configuration's are "config/" and the
// keys of ConfigSecret).
const (
	entryConfig        = "config/" + ConfigKey
	entryOverlays      = "config/" + OverlaysKey
	entryState         = "state.json"
	entrySecrets       = "secrets.json"
	entryRegistrations = "registrations.json"
	entryDefinitions   = "rabbitmq/definitions.json"
	entryRedis         = "redis/dump.rdb"
)

// databaseEntry is the entry name of a database's dump.
func databaseEntry(e dbdump.Engine, db string) string {
	return "databases/" + e.Name + "/" + db + e.Extension
}

// SavedSecret is a Secret as a backup keeps it: enough to create it again.
type SavedSecret struct {
	// Operator marks a Secret the operator made and the configuration
	// names (a restore creates it only where it is missing).
	Operator    bool              `json:"operator,omitempty"`
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	Type        corev1.SecretType `json:"type"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Data        map[string][]byte `json:"data"`
}

// Object returns the Secret to create.
func (s SavedSecret) Object() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: s.Labels, Annotations: s.Annotations},
		Type:       s.Type, Data: s.Data,
	}
}

// Registrations are what is attached to the platform beyond its
// components: runners, runtimes and the runtimes' Git sources (Argo CD
// Applications) of the runtimes on the platform's own cluster. Managed
// clusters' Argo CD Secrets, which hold credentials, are in the Secrets
// entry. Git tokens are never in a backup: they live only on each
// runtime's cluster, and a restore asks for them again.
type Registrations struct {
	Runners       map[string]state.Runner  `json:"runners,omitempty"`
	Runtimes      map[string]state.Runtime `json:"runtimes,omitempty"`
	RuntimeConfig *state.RuntimeConfig     `json:"runtimeConfig,omitempty"`
	// GitSources are the Applications of Git sources, by runtime.
	GitSources map[string][]map[string]any `json:"gitSources,omitempty"`
	// ManagedClusters are the managed clusters' names, by runtime (their
	// Secrets are in the Secrets entry).
	ManagedClusters map[string][]string `json:"managedClusters,omitempty"`
	// NotCollected says what the backup could not read (and why).
	NotCollected []string `json:"notCollected,omitempty"`
}

// OnPlatformCluster reports whether a runner or runtime record is on the
// platform's own cluster (reached however onprem reaches the platform).
func OnPlatformCluster(kubeconfig, context string) bool { return kubeconfig == "" && context == "" }

// Labels of the objects of runtimes (installer/gitops, installer/managedcluster).
const (
	labelGitSource      = "onprem.dev/git-source"
	labelRuntime        = "onprem.dev/runtime"
	labelManagedCluster = "onprem.dev/managed-cluster"
	argoSecretType      = "argocd.argoproj.io/secret-type"
)

var applications = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}

// collected is what a backup holds besides the dumps.
type collected struct {
	config        map[string][]byte
	state         []byte
	secrets       []SavedSecret
	registrations Registrations
	// databases are the platform's databases by engine, sorted.
	databases map[string][]database
	// notCollected says what could not be read, and why.
	notCollected []string
}

type database struct {
	name, service string
}

// collect reads the configuration, the state, the generated Secrets, the
// registrations and the list of databases.
func collect(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface, ns string, st *state.State, config map[string][]byte) (*collected, error) {
	out := &collected{databases: map[string][]database{}}
	cfgSecret, cfgErr := c.CoreV1().Secrets(ns).Get(ctx, ConfigSecret, metav1.GetOptions{})
	if len(config) == 0 {
		sec, err := cfgSecret, cfgErr
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("the platform's configuration is not in the cluster (Secret %s/%s, written by 'onprem install' and 'onprem upgrade apply' of this onprem): run 'onprem install -c onprem.yaml' once, or give the configuration to the backup (-c onprem.yaml)", ns, ConfigSecret)
		case err != nil:
			return nil, fmt.Errorf("reading the configuration (Secret %s/%s): %w", ns, ConfigSecret, err)
		}
		config = sec.Data
		if len(config[ConfigKey]) == 0 {
			return nil, fmt.Errorf("Secret %s/%s has no %s: run 'onprem install -c onprem.yaml' once, or give the configuration to the backup (-c onprem.yaml)", ns, ConfigSecret, ConfigKey)
		}
	}
	out.config = config
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	out.state = data

	generated, err := generatedSecrets(ctx, c, ns, cfgSecret)
	if err != nil {
		return nil, err
	}
	for _, s := range generated {
		out.secrets = append(out.secrets, save(&s))
		for _, engine := range []string{dbdump.MongoDB, dbdump.PostgreSQL} {
			svc, ok := strings.CutSuffix(strings.TrimPrefix(s.Name, "onprem-"), "-"+engine)
			if !ok || !strings.HasPrefix(s.Name, "onprem-") || len(s.Data["database"]) == 0 {
				continue
			}
			out.databases[engine] = append(out.databases[engine], database{name: string(s.Data["database"]), service: svc})
		}
	}
	if cfgSecret != nil {
		for _, n := range strings.Split(cfgSecret.Annotations[ReferencedSecretsAnnotation], ",") {
			if n == "" {
				continue
			}
			sec, err := c.CoreV1().Secrets(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				out.notCollected = append(out.notCollected, fmt.Sprintf("Secret %s, which the configuration names: %v", n, err))
				continue
			}
			saved := save(sec)
			saved.Operator = true
			out.secrets = append(out.secrets, saved)
		}
	}
	for _, dbs := range out.databases {
		slices.SortFunc(dbs, func(a, b database) int { return strings.Compare(a.name, b.name) })
	}

	r := Registrations{Runners: st.Runners, Runtimes: st.Runtimes, RuntimeConfig: st.RuntimeConfig, NotCollected: out.notCollected}
	for _, name := range sortedKeys(st.Runtimes) {
		rt := st.Runtimes[name]
		if !OnPlatformCluster(rt.Kubeconfig, rt.Context) {
			continue
		}
		apps, err := dyn.Resource(applications).Namespace(rt.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelGitSource})
		if apierrors.IsForbidden(err) {
			r.NotCollected = append(r.NotCollected, fmt.Sprintf("runtime %s: its Git sources and managed clusters (this backup may not read namespace %s; an operator's 'onprem backup create' does)", name, rt.Namespace))
			continue
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("runtime %s: listing its Git sources: %w", name, err)
		}
		if apps != nil {
			for _, a := range apps.Items {
				if r.GitSources == nil {
					r.GitSources = map[string][]map[string]any{}
				}
				r.GitSources[name] = append(r.GitSources[name], clean(&a))
			}
		}
		mcs, err := c.CoreV1().Secrets(rt.Namespace).List(ctx, metav1.ListOptions{LabelSelector: argoSecretType + "=cluster," + labelRuntime + "=" + name + "," + labelManagedCluster})
		if err != nil {
			return nil, fmt.Errorf("runtime %s: listing its managed clusters: %w", name, err)
		}
		for _, s := range mcs.Items {
			out.secrets = append(out.secrets, save(&s))
			if r.ManagedClusters == nil {
				r.ManagedClusters = map[string][]string{}
			}
			r.ManagedClusters[name] = append(r.ManagedClusters[name], s.Labels[labelManagedCluster])
		}
	}
	out.registrations = r
	return out, nil
}

// generatedSecrets returns the Secrets onprem generated in ns: listed by
// label, or, where listing Secrets is not allowed (the scheduled backup's
// Role names each Secret it may read), read one by one by the names the
// configuration Secret keeps, with the runners' registrations.
func generatedSecrets(ctx context.Context, c kubernetes.Interface, ns string, cfgSecret *corev1.Secret) ([]corev1.Secret, error) {
	list, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: secrets.LabelGenerated + "=true"})
	if err == nil {
		return list.Items, nil
	}
	if !apierrors.IsForbidden(err) || cfgSecret == nil {
		return nil, fmt.Errorf("listing the generated Secrets of %s: %w", ns, err)
	}
	names := append(strings.Split(cfgSecret.Annotations[GeneratedSecretsAnnotation], ","), runnerRegistrations)
	var out []corev1.Secret
	for _, n := range names {
		if n == "" {
			continue
		}
		s, err := c.CoreV1().Secrets(ns).Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s/%s: %w", ns, n, err)
		}
		if s.Labels[secrets.LabelGenerated] == "true" {
			out = append(out, *s)
		}
	}
	return out, nil
}

// runnerRegistrations is installer/runner's Registrations Secret.
const runnerRegistrations = "onprem-runner-tokens"

func save(s *corev1.Secret) SavedSecret {
	return SavedSecret{Namespace: s.Namespace, Name: s.Name, Type: s.Type, Labels: s.Labels, Annotations: s.Annotations, Data: s.Data}
}

// clean keeps an object's identity, labels, annotations and spec: what is
// needed to create it again.
func clean(u *unstructured.Unstructured) map[string]any {
	meta := map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()}
	if l := u.GetLabels(); len(l) > 0 {
		meta["labels"] = l
	}
	if a := u.GetAnnotations(); len(a) > 0 {
		meta["annotations"] = a
	}
	out := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": meta}
	if spec, ok := u.Object["spec"]; ok {
		out["spec"] = spec
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
