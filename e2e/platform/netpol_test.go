//go:build linux

package platform

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"onprem.dev/onprem/installer/podexec"
)

// The kind ring's CNI is kube-router, which enforces NetworkPolicies: the
// rest of the e2e proves that every flow the platform uses is allowed (it
// would fail otherwise); this step proves that the flows it does not use
// are refused. The probes are the reference service's own `dial` command,
// run in a new pod or in a running service's container.

// netpolProbeNamespace is the namespace of the probe from outside the
// platform's namespace.
const netpolProbeNamespace = "netpol-probe"

// netpolTargets are the platform's addresses the probes try, by what they
// are.
type netpolTargets struct {
	mongodb, postgresql, redis, rabbitmq string
	routed                               string // a routed service's Service (its pods accept the ingress controller only)
	ingress                              string // the ingress controller's HTTPS Service: open to anyone
	outside                              string // an address outside the cluster (the registry on the docker host)
	dns                                  string // the cluster's DNS, over TCP: every pod may reach it
}

func (e *env) netpolTargets(ctx context.Context) netpolTargets {
	e.t.Helper()
	svc := func(labelSelector, port string) string {
		l, err := e.cluster.Client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{LabelSelector: labelSelector})
		if err != nil || len(l.Items) == 0 {
			e.t.Fatalf("the Service labelled %s in %s: %v (%d found)", labelSelector, namespace, err, len(l.Items))
		}
		return net.JoinHostPort(l.Items[0].Name+"."+namespace+".svc", port)
	}
	return netpolTargets{
		mongodb:    svc("app.kubernetes.io/name=mongodb", "27017"),
		postgresql: svc("app.kubernetes.io/name=postgresql", "5432"),
		redis:      svc("app.kubernetes.io/name=redis", "6379"),
		rabbitmq:   svc("app.kubernetes.io/name=rabbitmq", "5672"),
		routed:     net.JoinHostPort("pipelines-api."+namespace+".svc", "80"),
		ingress:    svc("app.kubernetes.io/name=ingress-controller", "443"),
		outside:    e.registry,
		dns:        "kube-dns.kube-system.svc:53",
	}
}

// networkPolicies runs the probes and fails on any flow that is open but
// should not be, or closed but should not be (the controls that show the
// probe's own network works).
func (e *env) networkPolicies(ctx context.Context) {
	e.t.Helper()
	tg := e.netpolTargets(ctx)
	databases := []string{tg.mongodb, tg.postgresql, tg.redis, tg.rabbitmq}

	// A pod with none of the platform's labels, in the platform's
	// namespace: the default deny leaves it DNS and nothing else, not
	// even the ingress controller. One in another namespace (no policy of
	// its own): the ingress controller answers it, the databases and the
	// routed service do not.
	if _, err := e.cluster.Client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: netpolProbeNamespace}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	defer func() {
		_ = e.cluster.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), netpolProbeNamespace, metav1.DeleteOptions{})
	}()
	image := e.serviceImage(ctx, "pipelines-api")
	for _, p := range []struct {
		ns           string
		open, closed []string
	}{
		{namespace, []string{tg.dns}, slices.Concat(databases, []string{tg.routed, tg.ingress, tg.outside})},
		{netpolProbeNamespace, []string{tg.dns, tg.ingress}, slices.Concat(databases, []string{tg.routed})},
	} {
		got := e.probePod(ctx, p.ns, image, append(slices.Clone(p.open), p.closed...))
		e.expectDial(fmt.Sprintf("an unlabelled pod in namespace %s", p.ns), got, p.open, p.closed)
	}

	// A running service: pipelines-api uses MongoDB, Redis and RabbitMQ,
	// not PostgreSQL; it reaches no address outside the cluster.
	got := e.dialFromService(ctx, "pipelines-api", tg.mongodb, tg.redis, tg.rabbitmq, tg.postgresql, tg.outside)
	e.expectDial("pipelines-api", got, []string{tg.mongodb, tg.redis, tg.rabbitmq}, []string{tg.postgresql, tg.outside})
}

// serviceImage is the image of a service's Deployment (the reference
// service, which has the dial command).
func (e *env) serviceImage(ctx context.Context, service string) string {
	e.t.Helper()
	d, err := e.cluster.Client.AppsV1().Deployments(namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return d.Spec.Template.Spec.Containers[0].Image
}

// newPodPolicyDelay is how long a new probe pod waits before it dials:
// kube-router programs a new pod's rules at its next sync after the pod
// gets its address (a second or two; until then the pod is not
// restricted), and the probe tests the policy, not that window.
const newPodPolicyDelay = 10 * time.Second

// probePod runs `refservice dial addrs...` in a new pod without labels in
// ns (restricted as the platform namespace's Pod Security admission
// requires) and returns what it printed.
func (e *env) probePod(ctx context.Context, ns, image string, addrs []string) string {
	e.t.Helper()
	pods := e.cluster.Client.CoreV1().Pods(ns)
	no, yes, user := false, true, int64(65532)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "netpol-probe-"},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: new(int64),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &user,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         append([]string{"/refservice", "dial", "--after", newPodPolicyDelay.String()}, addrs...),
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("probe pod in %s: %v", ns, err)
	}
	name := created.Name
	defer func() { _ = pods.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) }()
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return true, nil
		case corev1.PodFailed:
			return false, fmt.Errorf("probe pod %s/%s failed: %+v", ns, name, p.Status.ContainerStatuses)
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("probe pod %s/%s: %v", ns, name, err)
	}
	out, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		e.t.Fatalf("probe pod %s/%s: its log: %v", ns, name, err)
	}
	return string(out)
}

// dialFromService runs `refservice dial addrs...` in a running pod of the
// service's Deployment.
func (e *env) dialFromService(ctx context.Context, service string, addrs ...string) string {
	e.t.Helper()
	pods, err := e.cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + service})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		var out strings.Builder
		ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
		target := podexec.Target{Namespace: namespace, Pod: p.Name, Container: p.Spec.Containers[0].Name}
		if err := ex.Exec(ctx, target, append([]string{"/refservice", "dial"}, addrs...), nil, &out); err != nil {
			e.t.Fatalf("dial from %s: %v", target, err)
		}
		return out.String()
	}
	e.t.Fatalf("no running pod of %s", service)
	return ""
}

// expectDial checks dial's output: every address of open answered, every
// address of closed did not. It logs the outcome of each.
func (e *env) expectDial(from, output string, open, closed []string) {
	e.t.Helper()
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(output))
	for sc.Scan() {
		state, rest, _ := strings.Cut(sc.Text(), " ")
		addr, _, _ := strings.Cut(rest, ": ")
		got[addr] = state
	}
	var wrong []string
	for want, addrs := range map[string][]string{"open": open, "closed": closed} {
		for _, a := range addrs {
			if got[a] != want {
				wrong = append(wrong, fmt.Sprintf("%s is %q, want %s", a, got[a], want))
			}
		}
	}
	if len(wrong) > 0 {
		e.t.Fatalf("NetworkPolicies, from %s: %s\ndial printed:\n%s", from, strings.Join(wrong, "; "), output)
	}
	e.t.Logf("NetworkPolicies, from %s: %d allowed flows open, %d other flows refused (%s)", from, len(open), len(closed),
		strconv.Quote(strings.TrimSpace(output)))
}

// replicatedNetworkPolicies probes the replicated databases' members, each
// at its own address: their peers' ports (Patroni's REST API, which can
// switch the primary over; the Sentinels; Erlang's distribution and epmd)
// answer only the other members, and their clients' ports only the
// services that use the database, as with one server. The peers' own
// flows are proved by the failovers.
func (e *env) replicatedNetworkPolicies(ctx context.Context) {
	e.t.Helper()
	at := func(db string, ports ...int) []string {
		var addrs []string
		for _, p := range e.members(ctx, db) {
			for _, port := range ports {
				addrs = append(addrs, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)))
			}
		}
		return addrs
	}
	sql, patroni := at("postgresql", 5432), at("postgresql", 8008)
	redis, sentinel := at("redis", 6379), at("redis", 26379)
	amqp, erlang := at("rabbitmq", 5672), at("rabbitmq", 25672, 4369)
	peers := slices.Concat(patroni, sentinel, erlang)
	dns := "kube-dns.kube-system.svc:53"

	got := e.probePod(ctx, namespace, e.serviceImage(ctx, "pipelines-api"), slices.Concat([]string{dns}, sql, redis, amqp, peers))
	e.expectDial("an unlabelled pod, to the members", got, []string{dns}, slices.Concat(sql, redis, amqp, peers))
	got = e.dialFromService(ctx, "pipelines-api", slices.Concat(redis, amqp, sql, peers)...)
	e.expectDial("pipelines-api, to the members", got, slices.Concat(redis, amqp), slices.Concat(sql, peers))
	got = e.dialFromService(ctx, "audit-manager", slices.Concat(sql, peers, redis)...)
	e.expectDial("audit-manager, to the members", got, sql, slices.Concat(peers, redis))
}
