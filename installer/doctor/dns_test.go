package doctor

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/preflight"
)

func dnsPod(name, node string, ready bool) corev1.Pod {
	st := corev1.ConditionTrue
	cs := corev1.ContainerStatus{Name: "coredns", Ready: ready, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	if !ready {
		st = corev1.ConditionFalse
		cs.RestartCount = 4
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: preflight.DNSNamespace, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}},
			ContainerStatuses: []corev1.ContainerStatus{cs}}}
}

func node(name string, ready corev1.ConditionStatus) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
}

// The cluster's DNS: nothing said while every pod is ready (or none was
// collected); a warning when some are not; an error when none answers,
// counting a pod on a lost node as not answering even while its own
// Ready condition has not caught up, with the command that starts it
// elsewhere.
func TestClusterDNS(t *testing.T) {
	nodes := []corev1.Node{node("cp", corev1.ConditionTrue), node("w1", corev1.ConditionTrue), node("w2", corev1.ConditionUnknown)}
	for _, tc := range []struct {
		name     string
		pods     []corev1.Pod
		severity Severity // "" for no finding
		says     []string
		fix      []string
	}{
		{name: "not collected"},
		{name: "all ready", pods: []corev1.Pod{dnsPod("coredns-a", "cp", true), dnsPod("coredns-b", "w1", true)}},
		{name: "one crashing", pods: []corev1.Pod{dnsPod("coredns-a", "cp", true), dnsPod("coredns-b", "w1", false)},
			severity: Warning, says: []string{"1 of its 2 pods ready", "pod kube-system/coredns-b on node w1: not ready (container coredns waiting: CrashLoopBackOff; container coredns restarted 4 times)", "pod kube-system/coredns-a on node cp: ready"},
			fix: []string{"kubectl -n kube-system logs -l k8s-app=kube-dns", "docs/availability.md"}},
		{name: "both on the lost node, still marked ready", pods: []corev1.Pod{dnsPod("coredns-a", "w2", true), dnsPod("coredns-b", "w2", true)},
			severity: Error, says: []string{"no ready pod", "pod kube-system/coredns-a on node w2: its node is lost"},
			fix: []string{"kubectl -n kube-system delete pod coredns-a coredns-b --force --grace-period=0", "docs/availability.md"}},
		{name: "none ready", pods: []corev1.Pod{dnsPod("coredns-a", "cp", false)},
			severity: Error, says: []string{"no ready pod", "CrashLoopBackOff"}, fix: []string{"describe pods -l k8s-app=kube-dns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			s.Cluster.Nodes = nodes
			s.Cluster.DNS = tc.pods
			got := only(t, Analyze(s), "cluster-dns")
			if tc.severity == "" {
				if len(got) != 0 {
					t.Fatalf("findings %+v, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("findings %+v, want one", got)
			}
			f := got[0]
			if f.Severity != tc.severity || !holds(f, tc.says...) {
				t.Errorf("finding %+v\nwant severity %s saying %q", f, tc.severity, tc.says)
			}
			for _, fix := range tc.fix {
				if !strings.Contains(f.Remediation, fix) {
					t.Errorf("remediation %q does not say %q", f.Remediation, fix)
				}
			}
		})
	}
}
