package preflight

import (
	"context"
	"fmt"
	"sort"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/config"
)

const storageID = "storage"

// Annotations that mark a default StorageClass (the beta one is still
// honoured by the API server).
const (
	defaultClassAnnotation     = "storageclass.kubernetes.io/is-default-class"
	betaDefaultClassAnnotation = "storageclass.beta.kubernetes.io/is-default-class"
)

// storageCheck: every StorageClass the platform's volumes name exists, and
// a default one exists when a volume names none.
func storageCheck() Check {
	return Check{
		ID:       storageID,
		Title:    "the StorageClasses the platform's volumes use exist (the configured ones, or a default)",
		Severity: Blocking,
		Run:      runStorage,
	}
}

// claim is one volumeClaimTemplate of a rendered StatefulSet.
type claim struct {
	Component string
	Object    string // StatefulSet/name
	Name      string
	// Class is the storageClassName; nil when it names none (the default
	// class), "" for no class (pre-provisioned volumes only).
	Class *string
}

// renderedClaims lists the volume claims the rendered StatefulSets make.
func renderedClaims(env *Env) []claim {
	var out []claim
	eachRenderedEntry(env, "StatefulSet", []string{"spec", "volumeClaimTemplates"}, func(component string, o *unstructured.Unstructured, m map[string]any) {
		cl := claim{Component: component, Object: "StatefulSet/" + o.GetName()}
		cl.Name, _, _ = unstructured.NestedString(m, "metadata", "name")
		if sc, found, _ := unstructured.NestedString(m, "spec", "storageClassName"); found {
			cl.Class = &sc
		}
		out = append(out, cl)
	})
	return out
}

// classField names the onprem.yaml field a component's StorageClass comes
// from.
func classField(in *config.Installation, component string) string {
	if in != nil {
		var db *config.Database
		switch component {
		case "mongodb":
			db = &in.Spec.Databases.MongoDB
		case "postgresql":
			db = &in.Spec.Databases.PostgreSQL
		case "redis":
			db = &in.Spec.Databases.Redis
		case "rabbitmq":
			db = &in.Spec.Databases.RabbitMQ
		}
		if db != nil && db.Persistence.StorageClass != "" && db.Persistence.StorageClass != in.Spec.Storage.ClassName {
			return "spec.databases." + component + ".persistence.storageClass"
		}
		if in.Spec.Storage.ClassName != "" {
			return "spec.storage.className"
		}
	}
	return "spec.components." + component + ".values"
}

func isDefaultClass(sc *storagev1.StorageClass) bool {
	return sc.Annotations[defaultClassAnnotation] == "true" || sc.Annotations[betaDefaultClassAnnotation] == "true"
}

func describeClass(sc *storagev1.StorageClass) string {
	mode := storagev1.VolumeBindingImmediate
	if sc.VolumeBindingMode != nil {
		mode = *sc.VolumeBindingMode
	}
	s := fmt.Sprintf("%s (provisioner %s, volumeBindingMode %s", sc.Name, sc.Provisioner, mode)
	if mode == storagev1.VolumeBindingWaitForFirstConsumer {
		s += ": volumes are created when their pod is scheduled, so a claim stays Pending until then, which is normal"
	}
	return s + ")"
}

func runStorage(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Blocking, "cluster", "rendered"); !ok {
		return out
	}
	claims := renderedClaims(env)
	if len(claims) == 0 {
		return Passed("the platform makes no persistent volume claims (every database is external)")
	}
	list, err := env.Cluster.Client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cannotRun(Blocking, storageID, "list StorageClasses", err)
	}
	byName := map[string]*storagev1.StorageClass{}
	var defaults []string
	var names []string
	for i := range list.Items {
		sc := &list.Items[i]
		byName[sc.Name] = sc
		names = append(names, sc.Name)
		if isDefaultClass(sc) {
			defaults = append(defaults, sc.Name)
		}
	}
	sort.Strings(defaults)
	sort.Strings(names)
	// When several are marked default the API server picks the newest;
	// say which.
	var def *storagev1.StorageClass
	for _, n := range defaults {
		if sc := byName[n]; def == nil || sc.CreationTimestamp.After(def.CreationTimestamp.Time) {
			def = sc
		}
	}

	var problems, details []string
	used := map[string]bool{}
	var staticClaims []string
	var needDefault []string
	absent := map[string][]string{}
	var absentOrder []string
	for _, cl := range claims {
		what := cl.Object + " volume " + cl.Name
		switch {
		case cl.Class == nil:
			needDefault = append(needDefault, what)
			if def != nil {
				used[def.Name] = true
			}
		case *cl.Class == "":
			staticClaims = append(staticClaims, what)
		default:
			if sc, ok := byName[*cl.Class]; ok {
				used[sc.Name] = true
			} else {
				key := fmt.Sprintf("StorageClass %s (from %s)", *cl.Class, classField(env.Installation, cl.Component))
				if _, seen := absent[key]; !seen {
					absentOrder = append(absentOrder, key)
				}
				absent[key] = append(absent[key], what)
			}
		}
	}
	for _, key := range absentOrder {
		problems = append(problems, fmt.Sprintf("%s does not exist; %s need%s it", key, clusterList(absent[key], 4), clusterVerbS(len(absent[key]))))
	}
	if len(needDefault) > 0 && def == nil {
		problems = append(problems, fmt.Sprintf("%d volume%s name no StorageClass (%s) and the cluster has no default StorageClass",
			len(needDefault), clusterPlural(len(needDefault)), clusterList(needDefault, 3)))
	}
	avail := "the cluster has no StorageClass at all"
	if len(names) > 0 {
		avail = "StorageClasses: " + strings.Join(names, ", ")
	}
	if len(problems) > 0 {
		rem := "set spec.storage.className (or spec.databases.NAME.persistence.storageClass) in onprem.yaml to one of the cluster's StorageClasses, or mark one as the default (kubectl patch storageclass NAME -p '{\"metadata\":{\"annotations\":{\"storageclass.kubernetes.io/is-default-class\":\"true\"}}}')"
		if len(names) == 0 {
			rem = "install a storage provisioner and its StorageClass (your platform's CSI driver, or e.g. local-path-provisioner for a test cluster), mark it default, or set spec.storage.className to it; then run preflight again"
		}
		return Outcome{Result: Fail, Message: strings.Join(problems, "; ") + "; " + avail, Remediation: rem}
	}
	for _, n := range clusterSortedKeys(used) {
		details = append(details, describeClass(byName[n]))
	}
	if len(defaults) > 1 {
		details = append(details, fmt.Sprintf("several StorageClasses are marked default (%s): the API server uses the newest, %s", strings.Join(defaults, ", "), def.Name))
	}
	var parts []string
	if n := len(claims) - len(staticClaims); n > 0 {
		parts = append(parts, fmt.Sprintf("%d volume%s will use %s", n, clusterPlural(n), strings.Join(details, "; ")))
	}
	if len(staticClaims) > 0 {
		parts = append(parts, fmt.Sprintf("%s name the empty StorageClass and bind only to pre-provisioned PersistentVolumes", clusterList(staticClaims, 3)))
	}
	msg := strings.Join(parts, "; ")
	return Passed("%s", msg)
}

func clusterSortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
