package action

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/topology"
)

// DefaultNamespace is the platform namespace when neither a flag nor a
// configuration file says otherwise.
const DefaultNamespace = "onprem"

// Target says which installation a command without a full configuration
// (status, uninstall) works on.
type Target struct {
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
	// Namespace of the platform; when empty, the one of ConfigPath if that
	// file exists, else DefaultNamespace.
	Namespace  string
	ConfigPath string
}

// namespace resolves the platform namespace.
func (t Target) namespace(ctx context.Context) (string, error) {
	if t.Namespace != "" {
		return t.Namespace, nil
	}
	if t.ConfigPath != "" {
		if _, err := os.Stat(t.ConfigPath); err == nil {
			l, err := (Source{ConfigPath: t.ConfigPath}).Load(ctx)
			if err != nil {
				return "", err
			}
			l.Close()
			return l.Installation.Spec.Namespace, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return DefaultNamespace, nil
}

// Status reports what is installed and how it is doing, drift included:
// each component's live objects compared with its deployed release, as
// install compares them before it repairs (nothing is changed).
type Status struct {
	Target
	// Exec asks MongoDB's replica set members their roles and lag
	// (default: in the pods, through the API server).
	Exec podexec.Executor
}

// RecentOperations is how many operations StatusResult.Recent holds.
const RecentOperations = 8

// ComponentStatus is one component's state.
type ComponentStatus struct {
	Name     string `json:"name"`
	Chart    string `json:"chart,omitempty"`
	Revision int    `json:"revision"`
	// Release is Helm's status of the last release (deployed, failed, ...).
	Release string `json:"release"`
	Ready   int32  `json:"ready"`
	Desired int32  `json:"desired"`
	// LastError is the last recorded failure, if the last apply failed.
	LastError string `json:"lastError,omitempty"`
	// Drift names the live objects that differ from the component's
	// deployed release in a field onprem sets, and what differs
	// ("Deployment/gitops-ui image"): 'onprem install' reverts them.
	Drift []string `json:"drift,omitempty"`
	// DriftError says why the live objects could not be compared.
	DriftError string `json:"driftError,omitempty"`
}

// StatusResult is the state of an installation.
type StatusResult struct {
	Installation  string            `json:"installation,omitempty"`
	Namespace     string            `json:"namespace"`
	Installed     bool              `json:"installed"`
	Version       string            `json:"version,omitempty"`
	ConfigDigest  string            `json:"configDigest,omitempty"`
	Components    []ComponentStatus `json:"components"`
	LastOperation *state.Operation  `json:"lastOperation,omitempty"`
	// Lock is who holds the installation's lock now (nil: free, or it
	// could not be read).
	Lock *state.LockState `json:"lock,omitempty"`
	// Recent are the last operations of the history, newest first (at
	// most RecentOperations).
	Recent []state.Operation `json:"recent,omitempty"`
	// Backups are the scheduled backups and the newest backup.
	Backups *BackupStatus `json:"backups,omitempty"`
	// Certificates are the platform's: those of its namespace's TLS
	// Secrets (onprem's self-signed CA and certificate, or the operator's
	// spec.tls.secretName), with how soon each expires.
	Certificates []CertificateStatus `json:"certificates,omitempty"`
	// Databases are the replicated databases (spec.availability high):
	// each member's role, node, state and lag, and whether the database
	// can fail over now (installer/topology).
	Databases []*topology.Topology `json:"databases,omitempty"`
}

// CertificateStatus is one certificate and its expiry: a warning within
// 30 days, an error within 7 or once expired (installer/certs).
type CertificateStatus struct {
	certs.Certificate
	DaysLeft int         `json:"daysLeft"`
	Level    certs.Level `json:"level"`
}

// platformCertificates reads the certificates of the TLS Secrets of ns.
func platformCertificates(ctx context.Context, c kubernetes.Interface, ns string, now time.Time) ([]CertificateStatus, error) {
	l, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeTLS)})
	if err != nil {
		return nil, fmt.Errorf("reading the platform's TLS Secrets in %s: %w", ns, err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	var out []CertificateStatus
	for i := range l.Items {
		for _, cert := range certs.InSecret(&l.Items[i]) {
			out = append(out, CertificateStatus{Certificate: cert, DaysLeft: certs.DaysLeft(now, cert.NotAfter), Level: certs.Judge(now, cert.NotAfter)})
		}
	}
	return out, nil
}

// Run reads the state record, the Helm releases and the workloads.
func (s *Status) Run(ctx context.Context) (*StatusResult, error) {
	ns, err := s.Target.namespace(ctx)
	if err != nil {
		return nil, err
	}
	cl, err := connect(ctx, s.Conn, s.Cluster)
	if err != nil {
		return nil, err
	}
	st, err := state.NewStore(cl.Client, ns).Load(ctx)
	if err != nil {
		return nil, err
	}
	out := &StatusResult{Installation: st.Installation, Namespace: ns, Version: st.Version, ConfigDigest: st.ConfigDigest,
		Installed: st.Version != "" || len(st.Components) > 0}
	if n := len(st.History); n > 0 {
		op := st.History[n-1]
		out.LastOperation = &op
		for i := n - 1; i >= 0 && len(out.Recent) < RecentOperations; i-- {
			out.Recent = append(out.Recent, st.History[i])
		}
	}
	if lk, err := state.ReadLock(ctx, cl.Client, ns, time.Now()); err == nil {
		out.Lock = lk
	}
	releases := apply.NewHelmReleases(cl.Getter, ns, nil)
	checker, err := apply.NewDriftChecker(cl.Getter, ns)
	if err != nil {
		return nil, err
	}
	for _, name := range orderedComponents(st) {
		sc := st.Components[name]
		cs := ComponentStatus{Name: name, Chart: chartRef(sc), Revision: sc.Revision}
		if msg, failed := strings.CutPrefix(sc.Status, "failed: "); failed {
			cs.LastError = msg
		}
		if info, err := releases.Last(ctx, name); err != nil {
			cs.Release = "unknown: " + err.Error()
		} else if info == nil {
			cs.Release = "missing"
		} else {
			cs.Release, cs.Revision = info.Status, info.Revision
			if cs.Drift, err = releaseDrift(ctx, checker, name, info); err != nil {
				cs.DriftError = err.Error()
			}
		}
		cs.Ready, cs.Desired, err = readiness(ctx, cl.Client, ns, name)
		if err != nil && cs.LastError == "" {
			cs.LastError = "reading workloads: " + err.Error()
		}
		out.Components = append(out.Components, cs)
	}
	if out.Backups, err = backupStatus(ctx, cl.Client, ns, st); err != nil {
		return out, err
	}
	if out.Certificates, err = platformCertificates(ctx, cl.Client, ns, time.Now()); err != nil {
		return out, err
	}
	if _, ok := st.Components["postgresql"]; ok {
		top, err := topology.PostgreSQLCluster(ctx, cl.Client, ns)
		if err != nil {
			return out, err
		}
		if top.Replicated {
			out.Databases = append(out.Databases, top)
		}
	}
	if _, ok := st.Components[topology.RabbitMQ]; ok {
		top, err := topology.RabbitMQCluster(ctx, cl.Client, ns)
		if err != nil {
			return out, err
		}
		if top.Replicated {
			out.Databases = append(out.Databases, top)
		}
	}
	if _, ok := st.Components[topology.Redis]; ok {
		top, err := topology.RedisCluster(ctx, cl.Client, ns)
		if err != nil {
			return out, err
		}
		if top.Replicated {
			out.Databases = append(out.Databases, top)
		}
	}
	if _, ok := st.Components[topology.MongoDB]; ok {
		top, err := topology.MongoDBCluster(ctx, cl.Client, ns, mongoDBProbe(s.Exec, cl))
		if err != nil {
			return out, err
		}
		if top.Replicated {
			out.Databases = append(out.Databases, top)
		}
	}
	return out, nil
}

// mongoDBProbe asks a member of MongoDB's replica set for its status with
// ex (nil: in the pods, through the API server of cl): read-only, each
// member's answer bounded by topology.DefaultMongoDBTimeout.
func mongoDBProbe(ex podexec.Executor, cl *kube.Cluster) *topology.MongoDBProbe {
	if ex == nil {
		ex = podexec.Kube{Config: cl.Config, Client: cl.Client}
	}
	return &topology.MongoDBProbe{Exec: ex, Command: dbdump.ReplSetStatus()}
}

func chartRef(c state.Component) string {
	if c.Chart == "" {
		return ""
	}
	return c.Chart + "-" + c.ChartVersion
}

// orderedComponents lists the state's components after their
// dependencies (name order among equals).
func orderedComponents(st *state.State) []string {
	names := make([]string, 0, len(st.Components))
	for n := range st.Components {
		names = append(names, n)
	}
	sort.Strings(names)
	done := map[string]bool{}
	var out []string
	var visit func(string, int)
	visit = func(n string, depth int) {
		if done[n] || depth > len(names) {
			return
		}
		done[n] = true
		for _, d := range st.Components[n].DependsOn {
			if _, ok := st.Components[d]; ok {
				visit(d, depth+1)
			}
		}
		out = append(out, n)
	}
	if _, ok := st.Components[render.PlatformComponent]; ok {
		visit(render.PlatformComponent, 0)
	}
	for _, n := range names {
		visit(n, 0)
	}
	return out
}

// readiness sums the ready and desired replicas of a component's
// workloads (a Job counts 1 when it succeeded).
func readiness(ctx context.Context, c kubernetes.Interface, ns, component string) (ready, desired int32, err error) {
	sel := metav1.ListOptions{LabelSelector: render.ComponentLabel + "=" + component}
	deps, err := c.AppsV1().Deployments(ns).List(ctx, sel)
	if err != nil {
		return 0, 0, err
	}
	for _, d := range deps.Items {
		ready, desired = ready+d.Status.ReadyReplicas, desired+replicas(d.Spec.Replicas)
	}
	sts, err := c.AppsV1().StatefulSets(ns).List(ctx, sel)
	if err != nil {
		return 0, 0, err
	}
	for _, s := range sts.Items {
		ready, desired = ready+s.Status.ReadyReplicas, desired+replicas(s.Spec.Replicas)
	}
	jobs, err := c.BatchV1().Jobs(ns).List(ctx, sel)
	if err != nil {
		return 0, 0, err
	}
	for _, j := range jobs.Items {
		desired++
		if jobSucceeded(&j) {
			ready++
		}
	}
	return ready, desired, nil
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func jobSucceeded(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == "True" {
			return true
		}
	}
	return false
}
