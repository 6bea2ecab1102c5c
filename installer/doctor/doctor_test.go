package doctor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/fault"
	"onprem.dev/onprem/installer/gitops"
	"onprem.dev/onprem/installer/runner"
	"onprem.dev/onprem/installer/snapshot"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/preflight"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func base() *snapshot.Snapshot {
	return &snapshot.Snapshot{Meta: snapshot.Meta{CollectedAt: now, Namespace: "onprem", Namespaces: []string{"onprem"}},
		Namespaces: map[string]*snapshot.Objects{"onprem": {}}}
}

func only(t *testing.T, rep *Report, analyzer string) []Finding {
	t.Helper()
	var out []Finding
	for _, f := range rep.Findings {
		if f.Analyzer == analyzer {
			out = append(out, f)
		}
	}
	return out
}

func holds(f Finding, says ...string) bool {
	text := f.Title + "\n" + strings.Join(f.Evidence, "\n")
	for _, s := range says {
		if !strings.Contains(text, s) {
			return false
		}
	}
	return true
}

func crashingPod(name, component string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem", Labels: map[string]string{"onprem.dev/component": component}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "quay.io/codefresh/" + component + ":2.8.0"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: 7,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}}}}}
}

// The analyzers whose evidence is in logs and records, which the
// integration ring's simulated kubelet cannot produce: the last log lines
// of a crash, a full volume, a failed Helm release, attachments, preflight.
func TestAnalyzersReadLogsRecordsAndAttachments(t *testing.T) {
	s := base()
	s.Namespaces["onprem"].Pods = []corev1.Pod{crashingPod("cfapi-1", "cfapi"), crashingPod("mongodb-0", "mongodb")}
	s.Logs = []snapshot.Log{
		{Namespace: "onprem", Pod: "cfapi-1", Container: "app", Previous: true, Text: "starting\nconnecting to mongodb\nfatal: MONGO_URI is not set\n"},
		{Namespace: "onprem", Pod: "mongodb-0", Container: "app", Previous: true, Text: "WiredTiger error: write: No space left on device\n"},
	}
	s.Releases = []snapshot.Release{{Namespace: "onprem", Name: "cfapi", Revisions: []snapshot.Revision{
		{Revision: 3, Status: "superseded", Chart: "service", ChartVersion: "2.8.0"},
		{Revision: 4, Status: "failed", Chart: "service", ChartVersion: "2.9.0", Description: "context deadline exceeded"}}}}
	s.Attachments = &snapshot.Attachments{
		Runners:    []runner.Status{{Name: "gpu", Reachable: false, Problem: "the cluster at https://10.0.0.9:6443 does not answer"}, {Name: "ok", Ready: true}},
		Runtimes:   []gitops.Status{{Name: "prod", Reachable: true, Workloads: map[string]string{"argocd-server": "0/1"}}},
		GitSources: []gitops.GitSource{{Name: "apps", Runtime: "prod", URL: "https://git.example.com/apps.git", Health: "Degraded", Sync: "OutOfSync"}},
	}
	s.Preflight = &preflight.Report{Findings: []preflight.Finding{
		{ID: "cluster.capacity", Outcome: preflight.Outcome{Result: preflight.Fail, Message: "2 CPUs short", Remediation: "add a node"}},
		{ID: "clock.skew", Outcome: preflight.Outcome{Result: preflight.Warn, Message: "3s skew"}},
		{ID: "kube.version", Outcome: preflight.Outcome{Result: preflight.Pass, Message: "v1.36"}}}}
	rep := Analyze(s)

	if fs := only(t, rep, "crash-loop"); len(fs) != 2 || !holds(fs[0], "cfapi", "restarted 7 times", "exit: code 2", "log: fatal: MONGO_URI is not set") {
		t.Errorf("crash-loop: %+v", fs)
	}
	if fs := only(t, rep, "volume-full"); len(fs) != 1 || fs[0].Component != "mongodb" || !holds(fs[0], "No space left on device") {
		t.Errorf("volume-full: %+v", fs)
	}
	if fs := only(t, rep, "helm-release"); len(fs) != 1 || !holds(fs[0], "revision 4", "failed", "context deadline exceeded") {
		t.Errorf("helm-release: %+v", fs)
	}
	fs := only(t, rep, "attachments")
	if len(fs) != 3 || !holds(fs[0], "runner gpu", "does not answer") || !holds(fs[1], "runtime prod", "argocd-server 0/1") || fs[2].Severity != Warning {
		t.Errorf("attachments: %+v", fs)
	}
	if fs := only(t, rep, "preflight"); len(fs) != 2 || fs[0].Severity != Error || fs[0].Remediation != "add a node" || fs[1].Severity != Warning {
		t.Errorf("preflight: %+v", fs)
	}
	// Most severe first.
	for i := 1; i < len(rep.Findings); i++ {
		if rep.Findings[i-1].Severity.rank() > rep.Findings[i].Severity.rank() {
			t.Errorf("finding %d (%s) before %d (%s)", i-1, rep.Findings[i-1].Severity, i, rep.Findings[i].Severity)
		}
	}
	if !rep.HasErrors() {
		t.Error("no error")
	}
}

// A healthy record finds nothing; each kind of last operation says how it
// is finished, and a running one under a live lock is not a problem.
func TestLastOperationAndLock(t *testing.T) {
	op := func(kind, outcome string) *snapshot.Snapshot {
		s := base()
		s.State = &state.State{Version: "2.8.0", History: []state.Operation{{Kind: kind, Version: "2.9.0", Outcome: outcome, Started: now.Add(-time.Hour)},
			{Kind: state.KindBackup, Outcome: state.OutcomeSucceeded}}}
		return s
	}
	if fs := only(t, Analyze(op(state.KindInstall, state.OutcomeSucceeded)), "last-operation"); len(fs) != 0 {
		t.Errorf("succeeded: %+v", fs)
	}
	if fs := only(t, Analyze(op(state.KindUpgrade, state.OutcomeFailed)), "last-operation"); len(fs) != 1 || !strings.Contains(fs[0].Remediation, "onprem upgrade apply --to 2.9.0") {
		t.Errorf("failed upgrade: %+v", fs)
	}
	if fs := only(t, Analyze(op(state.KindUpgrade, state.OutcomeRolledBack)), "last-operation"); len(fs) != 1 || fs[0].Severity != Warning {
		t.Errorf("rolled back: %+v", fs)
	}
	running := op(state.KindRestore, state.OutcomeRunning)
	holder := "bob@host pid 1 (onprem 0.1.0 restore)"
	renewed := metav1.NewMicroTime(now.Add(-5 * time.Second))
	running.Namespaces["onprem"].Leases = append(running.Namespaces["onprem"].Leases, leaseOf(holder, renewed))
	rep := Analyze(running)
	if fs := only(t, rep, "last-operation"); len(fs) != 0 {
		t.Errorf("running under a live lock: %+v", fs)
	}
	if fs := only(t, rep, "stale-lock"); len(fs) != 1 || fs[0].Severity != Info || !strings.Contains(fs[0].Title, holder) {
		t.Errorf("live lock: %+v", fs)
	}
	running.Namespaces["onprem"].Leases[0].Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-time.Hour)}
	rep = Analyze(running)
	if fs := only(t, rep, "last-operation"); len(fs) != 1 || !strings.Contains(fs[0].Remediation, "onprem restore") {
		t.Errorf("interrupted restore: %+v", fs)
	}
}

func leaseOf(holder string, renewed metav1.MicroTime) coordinationv1.Lease {
	d := int32(30)
	return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: state.LeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d, RenewTime: &renewed}}
}

// The workload analyzers report what installer/fault finds, the
// classification every apply's wait reads too: the same title, fix and
// verdict (definitive: waiting will not fix it). Pods refused by
// admission and containers whose configuration is missing have analyzers
// of their own.
func TestWorkloadAnalyzersReportTheFaults(t *testing.T) {
	s := base()
	o := s.Namespaces["onprem"]
	pull := crashingPod("gitops-api-1", "gitops-api")
	pull.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "ErrImagePull", Message: "rpc error: code = NotFound desc = failed to pull and unpack image: not found"}}}
	cfg := crashingPod("cfapi-1", "cfapi")
	cfg.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "CreateContainerConfigError", Message: "couldn't find key password in Secret onprem/cfapi-mongodb"}}}
	o.Pods = []corev1.Pod{pull, cfg}
	o.ReplicaSets = []appsv1.ReplicaSet{{ObjectMeta: metav1.ObjectMeta{Name: "broadcaster-7c9", Labels: map[string]string{"onprem.dev/component": "broadcaster"}},
		Status: appsv1.ReplicaSetStatus{Conditions: []appsv1.ReplicaSetCondition{{Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue,
			Reason: "FailedCreate", Message: `pods "broadcaster-7c9-x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=4, limited: pods=4`}}}}}
	rep := Analyze(s)
	objs := &fault.Objects{Namespace: "onprem", Pods: o.Pods, ReplicaSets: o.ReplicaSets}
	want := map[string]fault.Fault{}
	for _, f := range fault.Analyze(objs, fault.Input{Now: now}) {
		want[f.Analyzer] = f
	}
	for _, id := range []string{"image-pull", "config-error", "admission-refused"} {
		fs := only(t, rep, id)
		if len(fs) != 1 {
			t.Fatalf("%s: %+v", id, fs)
		}
		w := want[id]
		if fs[0].Title != w.Title || fs[0].Remediation != w.Remediation || !fs[0].Definitive || fs[0].Severity != Error || fs[0].Component != w.Component {
			t.Errorf("%s: doctor %+v, fault %+v", id, fs[0], w)
		}
	}
}

// A component with no ready replica is an error (nothing serves); one
// that runs short but still has ready replicas (a node lost with
// availability high) is a warning, so that doctor does not report a
// serving platform as broken.
func TestComponentShortIsAWarning(t *testing.T) {
	two := int32(2)
	dep := func(name string, ready int32) appsv1.Deployment {
		return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem", Labels: map[string]string{"onprem.dev/component": name}},
			Spec: appsv1.DeploymentSpec{Replicas: &two}, Status: appsv1.DeploymentStatus{ReadyReplicas: ready}}
	}
	s := base()
	s.Namespaces["onprem"].Deployments = []appsv1.Deployment{dep("pipelines-api", 1), dep("gitops-api", 0), dep("audit-manager", 2)}
	got := map[string]Finding{}
	for _, f := range only(t, Analyze(s), "component-unavailable") {
		got[f.Component] = f
	}
	if len(got) != 2 {
		t.Fatalf("findings %+v, want pipelines-api's and gitops-api's", got)
	}
	if f := got["pipelines-api"]; f.Severity != Warning || !holds(f, "runs short", "1 of 2 replicas ready", "1/2 ready") || f.Remediation == "" {
		t.Errorf("pipelines-api (1 of 2 ready): %+v, want a warning that it runs short", f)
	}
	if f := got["gitops-api"]; f.Severity != Error || !holds(f, "is not available", "0 of 2 replicas ready") {
		t.Errorf("gitops-api (0 of 2 ready): %+v, want an error", f)
	}
}

// An Ingress without a load-balancer address is a warning only where the
// configuration expects one: a LoadBalancer controller Service (the
// default) or the operator's own controller; not with NodePort or
// ClusterIP, nor when the controller's pods take host ports. Without a
// recorded configuration, the controller's Service type decides.
func TestIngressAddressJudgedByConfiguration(t *testing.T) {
	ing := networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "gitops-ui", Namespace: "onprem", Labels: map[string]string{"onprem.dev/component": "gitops-ui"}},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "ci.example.com"}}}}
	svc := func(typ corev1.ServiceType) corev1.Service {
		return corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ingress-controller", Namespace: "onprem", Labels: map[string]string{"onprem.dev/component": "ingress"}},
			Spec: corev1.ServiceSpec{Type: typ}}
	}
	hostPortPod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ingress-controller-0", Namespace: "onprem", Labels: map[string]string{"onprem.dev/component": "ingress"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "traefik", Ports: []corev1.ContainerPort{{ContainerPort: 8443, HostPort: 443}}}}}}
	for _, c := range []struct {
		name   string
		config string
		svc    corev1.ServiceType
		pods   []corev1.Pod
		warn   bool
	}{
		{name: "default configuration (LoadBalancer)", config: "spec:\n  domain: ci.example.com\n", warn: true},
		{name: "LoadBalancer", config: "spec:\n  ingress: {serviceType: LoadBalancer}\n", warn: true},
		{name: "NodePort", config: "spec:\n  ingress: {serviceType: NodePort}\n", svc: corev1.ServiceTypeLoadBalancer},
		{name: "ClusterIP", config: "spec:\n  ingress: {serviceType: ClusterIP}\n"},
		{name: "the operator's own controller", config: "spec:\n  ingress: {mode: existing, className: nginx}\n", warn: true},
		{name: "host ports", config: "spec:\n  ingress: {serviceType: LoadBalancer}\n", pods: []corev1.Pod{hostPortPod}},
		{name: "no configuration, a NodePort Service", svc: corev1.ServiceTypeNodePort},
		{name: "no configuration, a LoadBalancer Service", svc: corev1.ServiceTypeLoadBalancer, warn: true},
		{name: "no configuration, no controller Service", warn: true},
	} {
		s := base()
		if c.config != "" {
			s.Config = []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\n" + c.config)
		}
		o := s.Namespaces["onprem"]
		o.Ingresses = []networkingv1.Ingress{ing}
		o.Pods = c.pods
		if c.svc != "" {
			o.Services = []corev1.Service{svc(c.svc)}
		}
		got := only(t, Analyze(s), "ingress")
		if c.warn && (len(got) != 1 || got[0].Severity != Warning || !holds(got[0], "has no address")) {
			t.Errorf("%s: want one warning that the Ingress has no address, got %+v", c.name, got)
		}
		if !c.warn && len(got) != 0 {
			t.Errorf("%s: want no finding, got %+v", c.name, got)
		}
	}
}

// Drift is a warning per component that names every drifted object and
// says that 'onprem install' reverts it; a component compared without
// drift, or that could not be compared, is not a finding.
func TestDriftFinding(t *testing.T) {
	s := base()
	s.Drift = []snapshot.Drift{
		{Component: "gitops-ui", Objects: []string{"Deployment/gitops-ui image", "Service/gitops-ui (deleted)"}},
		{Component: "gitops-api"},
		{Component: "redis", Error: "forbidden"},
	}
	got := only(t, Analyze(s), "drift")
	if len(got) != 1 {
		t.Fatalf("drift findings: %+v", got)
	}
	f := got[0]
	if f.Severity != Warning || f.Component != "gitops-ui" || !holds(f, "drifted: Deployment/gitops-ui image", "drifted: Service/gitops-ui (deleted)") ||
		!strings.Contains(f.Remediation, "onprem install") {
		t.Errorf("drift finding: %+v", f)
	}
}

// A replicated database's OnDelete StatefulSet with members of its
// previous revision is named, each member with its revision, as a warning
// with the command that finishes the roll; one all of the new revision,
// or that rolls itself, is not.
func TestRollUnfinished(t *testing.T) {
	three := int32(3)
	yes := true
	sts := func(name string, strategy appsv1.StatefulSetUpdateStrategyType) appsv1.StatefulSet {
		return appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem", Labels: map[string]string{"onprem.dev/component": name}},
			Spec:   appsv1.StatefulSetSpec{Replicas: &three, UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: strategy}},
			Status: appsv1.StatefulSetStatus{UpdateRevision: name + "-new", ReadyReplicas: 3}}
	}
	member := func(set string, i int, rev string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", set, i), Namespace: "onprem",
			Labels:          map[string]string{"onprem.dev/component": set, appsv1.ControllerRevisionHashLabelKey: set + "-" + rev},
			OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: set, Controller: &yes}}}}
	}
	s := base()
	s.Namespaces["onprem"].StatefulSets = []appsv1.StatefulSet{
		sts("postgresql", appsv1.OnDeleteStatefulSetStrategyType), sts("redis", appsv1.OnDeleteStatefulSetStrategyType),
		sts("rabbitmq", appsv1.RollingUpdateStatefulSetStrategyType)}
	s.Namespaces["onprem"].Pods = []corev1.Pod{
		member("postgresql", 0, "old"), member("postgresql", 1, "new"), member("postgresql", 2, "old"),
		member("redis", 0, "new"), member("redis", 1, "new"), member("redis", 2, "new"),
		member("rabbitmq", 0, "old"), member("rabbitmq", 1, "new"), member("rabbitmq", 2, "new")}
	got := only(t, Analyze(s), "roll-unfinished")
	if len(got) != 1 {
		t.Fatalf("findings %+v, want postgresql's alone", got)
	}
	if f := got[0]; f.Severity != Warning || f.Component != "postgresql" ||
		!holds(f, "runs 2 of 3 members of its previous revision", "member postgresql-0: revision postgresql-old, not postgresql-new", "member postgresql-2") ||
		!strings.Contains(f.Remediation, "onprem upgrade apply") {
		t.Errorf("postgresql: %+v", f)
	}
}
