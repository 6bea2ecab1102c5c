// Package snapshot gathers what can be known about an installation from its
// cluster (objects, events, logs, Helm history, state, health, preflight)
// into one value, and writes it to and reads it from a set of files. The
// support bundle is such a set of files after redaction (installer/support);
// the analyzers (installer/doctor) read a Snapshot, whether it was collected
// just now from a live cluster or read back from a bundle.
//
// A Snapshot never holds a Secret's value: Secrets are collected as their
// names, types and keys, and the certificates among their values as their
// subjects and dates.
package snapshot

import (
	"encoding/json"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	storagev1 "k8s.io/api/storage/v1"

	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/gitops"
	"onprem.dev/onprem/installer/managedcluster"
	"onprem.dev/onprem/installer/runner"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/topology"
	"onprem.dev/onprem/preflight"
)

// Snapshot is one picture of an installation.
type Snapshot struct {
	Meta Meta `json:"meta"`
	// Config is the effective onprem.yaml of the last install or upgrade
	// (nil: none recorded).
	Config []byte `json:"-"`
	// State is the installation's record (nil: none).
	State *state.State `json:"-"`
	// Releases are the Helm releases of the collected namespaces with
	// their history, newest revision last.
	Releases []Release `json:"-"`
	// Namespaces holds each collected namespace's objects.
	Namespaces map[string]*Objects `json:"-"`
	Cluster    ClusterObjects      `json:"-"`
	// Logs are the containers' log tails.
	Logs []Log `json:"-"`
	// Certificates are those found in the collected namespaces' Secrets.
	Certificates []Certificate `json:"-"`
	// Health is each platform service's readiness answer.
	Health []Health `json:"-"`
	// Preflight is the report of the checks run at collection time.
	Preflight *preflight.Report `json:"-"`
	// Attachments are the runners, runtimes and what hangs off them.
	Attachments *Attachments `json:"-"`
	// Drift is, per component of the platform, what its live objects have
	// that differs from its deployed release (nil: not compared).
	Drift []Drift `json:"-"`
	// MongoDB is what MongoDB's replica set answered when asked its
	// status (nil: not asked, or no replica set).
	MongoDB *topology.MongoDBAnswer `json:"-"`
}

// Drift is how one component's live objects differ from what onprem
// applied in fields onprem sets: each object and what differs
// ("Deployment/gitops-ui image"), never a value.
type Drift struct {
	Component string   `json:"component"`
	Objects   []string `json:"objects,omitempty"`
	// Error says why it could not be compared.
	Error string `json:"error,omitempty"`
}

// Meta says what was collected, when, from where, and what was not.
type Meta struct {
	Onprem        string    `json:"onprem"`
	CollectedAt   time.Time `json:"collectedAt"`
	Server        string    `json:"server,omitempty"`
	ServerVersion string    `json:"serverVersion,omitempty"`
	// Namespace is the platform's; Namespaces every namespace collected.
	Namespace  string   `json:"namespace"`
	Namespaces []string `json:"namespaces"`
	// Collectors says how each collector went.
	Collectors []CollectorResult `json:"collectors"`
	// Limits are the log bounds used.
	Limits LogLimits `json:"logLimits"`
}

// CollectorResult is how one collector went: Skipped says why it collected
// nothing or only part (missing permission, a timeout).
type CollectorResult struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
	Items    int           `json:"items"`
	Skipped  []string      `json:"skipped,omitempty"`
}

// LogLimits bound the logs collected per container.
type LogLimits struct {
	Lines int64         `json:"lines"`
	Age   time.Duration `json:"age"`
	Bytes int64         `json:"bytes"`
}

// Objects are one namespace's objects.
type Objects struct {
	Pods           []corev1.Pod                `json:"pods,omitempty"`
	Deployments    []appsv1.Deployment         `json:"deployments,omitempty"`
	StatefulSets   []appsv1.StatefulSet        `json:"statefulsets,omitempty"`
	DaemonSets     []appsv1.DaemonSet          `json:"daemonsets,omitempty"`
	ReplicaSets    []appsv1.ReplicaSet         `json:"replicasets,omitempty"`
	Jobs           []batchv1.Job               `json:"jobs,omitempty"`
	CronJobs       []batchv1.CronJob           `json:"cronjobs,omitempty"`
	Services       []corev1.Service            `json:"services,omitempty"`
	EndpointSlices []discoveryv1.EndpointSlice `json:"endpointslices,omitempty"`
	// Endpoints are only those of a replicated database's own (Patroni's
	// leader lock and synchronous standbys: installer/topology).
	Endpoints              []corev1.Endpoints             `json:"endpoints,omitempty"`
	Ingresses              []networkingv1.Ingress         `json:"ingresses,omitempty"`
	NetworkPolicies        []networkingv1.NetworkPolicy   `json:"networkpolicies,omitempty"`
	PersistentVolumeClaims []corev1.PersistentVolumeClaim `json:"persistentvolumeclaims,omitempty"`
	ConfigMaps             []corev1.ConfigMap             `json:"configmaps,omitempty"`
	ServiceAccounts        []corev1.ServiceAccount        `json:"serviceaccounts,omitempty"`
	Events                 []corev1.Event                 `json:"events,omitempty"`
	Leases                 []coordinationv1.Lease         `json:"leases,omitempty"`
	// Secrets are names, types and keys only.
	Secrets []SecretInfo `json:"secrets,omitempty"`
}

// SecretInfo is a Secret without its values.
type SecretInfo struct {
	Name        string            `json:"name"`
	Type        string            `json:"type"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Keys        []string          `json:"keys"`
	Created     time.Time         `json:"created"`
}

// ClusterObjects are the cluster-wide objects that bear on the platform.
type ClusterObjects struct {
	Nodes             []corev1.Node               `json:"nodes,omitempty"`
	StorageClasses    []storagev1.StorageClass    `json:"storageclasses,omitempty"`
	PersistentVolumes []corev1.PersistentVolume   `json:"persistentvolumes,omitempty"`
	IngressClasses    []networkingv1.IngressClass `json:"ingressclasses,omitempty"`
	// Allocated is, per node, the sum of the requests of its non-finished
	// pods (cpu, memory) as collected.
	Allocated map[string]corev1.ResourceList `json:"allocated,omitempty"`
	// DNS are the cluster's DNS pods (preflight.DNSSelector in
	// preflight.DNSNamespace): every service reaches its databases by
	// name through them, so where they run and whether they are ready is
	// part of the platform's health. Nil when they were not collected.
	DNS []corev1.Pod `json:"dns,omitempty"`
}

// Release is one Helm release with its history.
type Release struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Revisions []Revision `json:"revisions"`
}

// Revision is one revision of a Helm release. Values are the values it was
// installed with (redacted when written to a bundle).
type Revision struct {
	Revision     int             `json:"revision"`
	Status       string          `json:"status"`
	Chart        string          `json:"chart"`
	ChartVersion string          `json:"chartVersion"`
	AppVersion   string          `json:"appVersion,omitempty"`
	Description  string          `json:"description,omitempty"`
	Deployed     time.Time       `json:"deployed,omitzero"`
	Values       json.RawMessage `json:"values,omitempty"`
}

// Last returns the newest revision, nil when there is none.
func (r Release) Last() *Revision {
	if len(r.Revisions) == 0 {
		return nil
	}
	return &r.Revisions[len(r.Revisions)-1]
}

// Log is the tail of one container's log.
type Log struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Previous: the log of the container's previous run.
	Previous bool   `json:"previous,omitempty"`
	Text     string `json:"-"`
	// Error says why there is no log (a pod whose logs are gone).
	Error string `json:"error,omitempty"`
}

// Certificate is one certificate found in a Secret.
type Certificate = certs.Certificate

// Health is one service's answer to its readiness endpoint: whether each
// of its dependencies (databases, queues) answers it.
type Health struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	Component string `json:"component,omitempty"`
	Path      string `json:"path"`
	// Answered: the service answered (Ready and Deps are its answer);
	// when not, Error says why.
	Answered bool              `json:"answered"`
	Ready    bool              `json:"ready"`
	Deps     map[string]string `json:"deps,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// Attachments are the runners, runtimes, Git sources and managed clusters
// with their health (never a token).
type Attachments struct {
	Runners         []runner.Status                    `json:"runners,omitempty"`
	Runtimes        []gitops.Status                    `json:"runtimes,omitempty"`
	GitSources      []gitops.GitSource                 `json:"gitSources,omitempty"`
	ManagedClusters map[string][]managedcluster.Status `json:"managedClusters,omitempty"`
	// Problems are what could not be read, per runtime or runner.
	Problems []string `json:"problems,omitempty"`
}

// Objects returns the objects of namespace ns (an empty set when it was
// not collected).
func (s *Snapshot) Objects(ns string) *Objects {
	if o := s.Namespaces[ns]; o != nil {
		return o
	}
	return &Objects{}
}

// LogOf returns the log of a container (previous or current), nil when
// not collected.
func (s *Snapshot) LogOf(ns, pod, container string, previous bool) *Log {
	for i := range s.Logs {
		l := &s.Logs[i]
		if l.Namespace == ns && l.Pod == pod && l.Container == container && l.Previous == previous {
			return l
		}
	}
	return nil
}

// Collector returns how the named collector went, nil when it did not run.
func (s *Snapshot) Collector(name string) *CollectorResult {
	for i := range s.Meta.Collectors {
		if s.Meta.Collectors[i].Name == name {
			return &s.Meta.Collectors[i]
		}
	}
	return nil
}
