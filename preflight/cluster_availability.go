package preflight

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/topology"
)

const availabilityID = "availability"

// MinHANodes is how many schedulable nodes spec.availability high needs:
// the three members of PostgreSQL and of RabbitMQ each on a node of their
// own, so that losing one node loses one member.
const MinHANodes = 3

// ZoneLabel is the well-known label of a node's zone.
const ZoneLabel = "topology.kubernetes.io/zone"

// nodeLocalProvisioners make volumes that live on one node's disk: with
// volumeBindingMode Immediate they are placed before the pod that needs
// them, which can pin two members of a database to one node or to a node
// that their spread rules exclude.
var nodeLocalProvisioners = []string{
	"kubernetes.io/no-provisioner", "rancher.io/local-path", "openebs.io/local",
	"topolvm.io", "local.csi.openebs.io", "lvm.csi.metal-stack.io",
}

// availabilityCheck: spec.availability high has the nodes and storage it
// needs to lose a node and keep serving.
func availabilityCheck() Check {
	return Check{
		ID:       availabilityID,
		Title:    "with spec.availability high: three schedulable nodes or more (a warning when all are in one zone, or when the cluster's DNS runs on one of them alone), and volumes that can be placed on each member's node; and spec.availability as installed, except for install, which moves the databases between single and high",
		Severity: Blocking,
		Run:      runAvailability,
	}
}

func runAvailability(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Blocking, "cluster", "installation", "rendered"); !ok {
		return out
	}
	in := env.Installation
	move, bad := availabilityChange(ctx, env)
	if bad {
		return move
	}
	var out Outcome
	if in.Spec.Availability != config.AvailabilityHigh {
		out = Passed("spec.availability is %s: nothing to check", orDefault(in.Spec.Availability, config.DefaultAvailability))
	} else {
		out = highAvailability(ctx, env)
	}
	switch {
	case move.Result != Warn || out.Result == Fail:
		return out
	case out.Result == Warn:
		move.Message += "; " + out.Message
		move.Remediation += "; " + out.Remediation
	}
	return move
}

// highAvailability checks the nodes and storage spec.availability high
// needs.
func highAvailability(ctx context.Context, env *Env) Outcome {
	in := env.Installation
	cs := env.Cluster.Client
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cannotRun(Blocking, availabilityID, "list nodes", err)
	}
	var usable []*corev1.Node
	var excluded, cordoned []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if why := nodeExclusion(n, in.Spec.Placement); why != "" {
			excluded = append(excluded, n.Name+" ("+why+")")
			if n.Spec.Unschedulable {
				// As it will be once uncordoned: schedulable, without the
				// taint the node controller gives cordoned nodes.
				u := n.DeepCopy()
				u.Spec.Unschedulable = false
				u.Spec.Taints = slices.DeleteFunc(u.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnschedulable })
				if nodeExclusion(u, in.Spec.Placement) == "" {
					cordoned = append(cordoned, n.Name)
				}
			}
			continue
		}
		usable = append(usable, n)
	}
	sort.Strings(excluded)
	sort.Strings(cordoned)
	if len(usable) < MinHANodes {
		// A platform that runs replicated already, on nodes of which some
		// are cordoned for a while (a drain, an operating system's
		// update): an upgrade or a re-run may go on, the members and
		// replicas it restarts there waiting for the uncordon.
		forms, err := installedForms(ctx, env.Cluster.Client, platformNamespace(env), in)
		if err != nil {
			return cannotRun(Blocking, availabilityID, "read the databases' StatefulSets in "+platformNamespace(env), err)
		}
		replicated := false
		for _, r := range forms {
			replicated = replicated || r
		}
		if replicated && len(usable)+len(cordoned) >= MinHANodes {
			verb := "are"
			if len(cordoned) == 1 {
				verb = "is"
			}
			return Outcome{Result: Warn, Details: excluded,
				Message: fmt.Sprintf("the platform runs replicated on %d nodes, of which %s %s cordoned: a database member whose volume is there, restarted now, waits until its node is uncordoned (onprem waits for it within --timeout); the platform's other pods go to the other nodes",
					len(usable)+len(cordoned), clusterList(cordoned, 5), verb),
				Remediation: "uncordon each node once its maintenance is done (kubectl uncordon NODE); to have every member restarted at once, uncordon before the operation"}
		}
		msg := fmt.Sprintf("spec.availability is high, which needs %d schedulable nodes or more (one per member of PostgreSQL and RabbitMQ, so that losing a node loses one), and the platform's pods can run on %d",
			MinHANodes, len(usable))
		if len(excluded) > 0 {
			msg += "; excluded: " + clusterList(excluded, 5)
		}
		return Outcome{Result: Fail, Message: msg, Details: excluded,
			Remediation: fmt.Sprintf("add nodes until %d can run the platform (or uncordon them, or widen spec.placement), or set spec.availability: single", MinHANodes)}
	}

	if out, bad := haStorage(ctx, env); bad {
		return out
	}

	return withDNS(spreadOverZones(usable), clusterDNS(ctx, cs, usable))
}

// spreadOverZones passes when the platform's nodes are in two zones or
// more, and warns that a zone's loss is not survived otherwise.
func spreadOverZones(usable []*corev1.Node) Outcome {
	zones := map[string][]string{}
	for _, n := range usable {
		zones[n.Labels[ZoneLabel]] = append(zones[n.Labels[ZoneLabel]], n.Name)
	}
	if len(zones) < 2 {
		where := "carry no zone label (" + ZoneLabel + ")"
		for z := range zones {
			if z != "" {
				where = "are in zone " + z
			}
		}
		return Outcome{Result: Warn,
			Message:     fmt.Sprintf("the %d schedulable nodes %s: losing a node is survived, losing the zone is not", len(usable), where),
			Remediation: "for zone failures, add nodes in other zones and label them " + ZoneLabel + " (the platform spreads over zones by itself); otherwise nothing to do"}
	}
	names := make([]string, 0, len(zones))
	for z := range zones {
		names = append(names, fmt.Sprintf("%s (%d)", orDefault(z, "no zone label"), len(zones[z])))
	}
	sort.Strings(names)
	return Passed("%d schedulable nodes in %d zones: %s", len(usable), len(zones), strings.Join(names, ", "))
}

// DNSNamespace and DNSSelector find the cluster's DNS pods: CoreDNS as
// kubeadm, k3s, RKE2 and the managed services install it, and kube-dns
// before it, carry this label.
const (
	DNSNamespace = "kube-system"
	DNSSelector  = "k8s-app=kube-dns"
)

// clusterDNS returns a warning when every ready pod of the cluster's DNS
// runs on one node that the platform runs on too: losing that node stops
// every name lookup in the cluster (a member's peers, a service's new
// connection to the new primary) until Kubernetes evicts and places the
// DNS pods again, five minutes by default, far beyond a failover's
// seconds. The cluster's DNS is the cluster's, so this is a warning with
// its fix, not a refusal. It returns a zero Outcome when there is nothing
// to say, and a passed one that says why it could not look.
func clusterDNS(ctx context.Context, cs kubernetes.Interface, usable []*corev1.Node) Outcome {
	pods, err := cs.CoreV1().Pods(DNSNamespace).List(ctx, metav1.ListOptions{LabelSelector: DNSSelector})
	if err != nil {
		return Passed("the cluster's DNS pods (%s in %s) could not be listed, so their spread is not checked: %v", DNSSelector, DNSNamespace, err)
	}
	platform := map[string]bool{}
	for _, n := range usable {
		platform[n.Name] = true
	}
	nodes := map[string]bool{}
	ready := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || !topology.PodReady(p) {
			continue
		}
		ready++
		nodes[p.Spec.NodeName] = true
	}
	if len(nodes) != 1 {
		// None found (another DNS, or none ready: the cluster check
		// names a cluster whose lookups fail), or spread over nodes.
		return Outcome{}
	}
	var node string
	for n := range nodes {
		node = n
	}
	if !platform[node] {
		// On a node the platform does not run on (a control-plane
		// node): losing one of the platform's nodes leaves it.
		return Outcome{}
	}
	return Outcome{Result: Warn,
		Message: fmt.Sprintf("the cluster's DNS (%s in %s) runs on node %s alone (%d ready pod(s)), which runs the platform too: losing that node stops every name lookup in the cluster, and with them the databases' failover, until Kubernetes places DNS again (about 5 minutes)",
			DNSSelector, DNSNamespace, node, ready),
		Remediation: "spread the cluster's DNS over nodes: 2 replicas or more with a required pod anti-affinity on kubernetes.io/hostname (docs/availability.md, \"The cluster's DNS\", gives the kubectl patch)"}
}

// withDNS adds the DNS warning, when there is one, to the zones' outcome.
func withDNS(zones, dns Outcome) Outcome {
	switch {
	case dns.Result != Warn:
		if dns.Message != "" {
			zones.Message += "; " + dns.Message
		}
		return zones
	case zones.Result == Warn:
		zones.Message += "; " + dns.Message
		zones.Remediation += "; " + dns.Remediation
		return zones
	}
	return dns
}

// replicatedDatabase is a database that spec.availability high runs as a
// cluster: its StatefulSet's pod template carries label when it does.
type replicatedDatabase struct {
	name, product, cluster, label string
	mode                          func(*config.Installation) string
}

// replicatedDatabases are the databases high availability replicates.
var replicatedDatabases = []replicatedDatabase{
	{name: topology.PostgreSQL, product: "PostgreSQL", cluster: "Patroni cluster", label: topology.ClusterLabel,
		mode: func(in *config.Installation) string { return in.Spec.Databases.PostgreSQL.Mode }},
	{name: "rabbitmq", product: "RabbitMQ", cluster: "RabbitMQ cluster", label: "onprem.dev/rabbitmq-cluster",
		mode: func(in *config.Installation) string { return in.Spec.Databases.RabbitMQ.Mode }},
	{name: "redis", product: "Redis", cluster: "Redis with Sentinel", label: "onprem.dev/redis-cluster",
		mode: func(in *config.Installation) string { return in.Spec.Databases.Redis.Mode }},
	{name: "mongodb", product: "MongoDB", cluster: "MongoDB replica set", label: "onprem.dev/mongodb-cluster",
		mode: func(in *config.Installation) string { return in.Spec.Databases.MongoDB.Mode }},
}

// AvailabilityChange is an installed database whose form (one server, or
// a replicated cluster) is not the one the configuration asks for.
type AvailabilityChange struct {
	// Engine is the database's component and StatefulSet (postgresql,
	// rabbitmq, redis, mongodb); Product its name for people.
	Engine, Product string
	// From and To describe the installed and the configured form.
	From, To string
}

func (c AvailabilityChange) String() string {
	return fmt.Sprintf("%s from %s to %s", c.Product, c.From, c.To)
}

// AvailabilityChanges lists the platform's in-cluster databases whose
// installed StatefulSet in namespace ns is a single server while in asks
// for spec.availability high, or the other way round. A StatefulSet
// cannot turn into the other form in place (PostgreSQL's first member
// would have to adopt the data while the others wait, which the
// StatefulSet's ordering does not allow; RabbitMQ's nodes start in
// parallel, which an existing StatefulSet cannot be changed to): install
// moves the data over (installer/action), upgrade and restore refuse.
func AvailabilityChanges(ctx context.Context, c kubernetes.Interface, ns string, in *config.Installation) ([]AvailabilityChange, error) {
	forms, err := installedForms(ctx, c, ns, in)
	if err != nil {
		return nil, err
	}
	var out []AvailabilityChange
	want := in.Spec.Availability == config.AvailabilityHigh
	for _, db := range replicatedDatabases {
		replicated, installed := forms[db.name]
		if !installed || replicated == want {
			continue
		}
		ch := AvailabilityChange{Engine: db.name, Product: db.product, From: "a single server", To: "a replicated " + db.cluster}
		if replicated {
			ch.From, ch.To = ch.To, ch.From
		}
		out = append(out, ch)
	}
	return out, nil
}

// installedForms says, for each in-cluster database whose StatefulSet is
// installed in ns, whether it runs in its replicated form.
func installedForms(ctx context.Context, c kubernetes.Interface, ns string, in *config.Installation) (map[string]bool, error) {
	forms := map[string]bool{}
	for _, db := range replicatedDatabases {
		if db.mode(in) == config.DatabaseModeExternal {
			continue
		}
		sts, err := c.AppsV1().StatefulSets(ns).Get(ctx, db.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading StatefulSet %s/%s: %w", ns, db.name, err)
		}
		forms[db.name] = sts.Spec.Template.Labels[db.label] != ""
	}
	return forms, nil
}

// availabilityChange reports the databases whose form would change. An
// operation that moves them (Env.MovesAvailability: install) is told what
// it will do, as a warning; any other fails, before anything is changed.
func availabilityChange(ctx context.Context, env *Env) (Outcome, bool) {
	ns := platformNamespace(env)
	changes, err := AvailabilityChanges(ctx, env.Cluster.Client, ns, env.Installation)
	if err != nil {
		return cannotRun(Blocking, availabilityID, "read the databases' StatefulSets in "+ns, err), true
	}
	if len(changes) == 0 {
		return Outcome{}, false
	}
	var what []string
	for _, c := range changes {
		what = append(what, c.String())
	}
	if !env.MovesAvailability {
		return Outcome{Result: Fail,
			Message: fmt.Sprintf("the installed platform in namespace %s has %s as spec.availability %s would change it: only onprem install moves databases between single and high",
				ns, strings.Join(what, "; "), orDefault(env.Installation.Spec.Availability, config.DefaultAvailability)),
			Remediation: "keep spec.availability as installed for this operation; change it with onprem install at the installed version (docs/availability.md)"}, true
	}
	return Outcome{Result: Warn,
		Message: fmt.Sprintf("install will move %s: the services stop, the databases are backed up to this machine, replaced and restored, then the services start again (minutes without service, no acknowledged write lost)",
			strings.Join(what, "; ")),
		Remediation: "run it in a maintenance window; docs/availability.md says what each step does and how an interrupted move finishes"}, false
}

// haStorage fails when a replicated database's volumes would come from a
// StorageClass that binds node-local volumes before scheduling.
func haStorage(ctx context.Context, env *Env) (Outcome, bool) {
	for _, cl := range renderedClaims(env) {
		product := ""
		for _, db := range replicatedDatabases {
			if cl.Component == db.name {
				product = db.product
			}
		}
		if product == "" {
			continue
		}
		var sc *storagev1.StorageClass
		if cl.Class != nil && *cl.Class != "" {
			got, err := env.Cluster.Client.StorageV1().StorageClasses().Get(ctx, *cl.Class, metav1.GetOptions{})
			if err != nil {
				continue // the storage check names a missing class
			}
			sc = got
		} else if cl.Class == nil {
			list, err := env.Cluster.Client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
			if err != nil {
				return cannotRun(Blocking, availabilityID, "list StorageClasses", err), true
			}
			for i := range list.Items {
				if isDefaultClass(&list.Items[i]) {
					sc = &list.Items[i]
				}
			}
		}
		if sc == nil {
			continue
		}
		immediate := sc.VolumeBindingMode == nil || *sc.VolumeBindingMode == storagev1.VolumeBindingImmediate
		local := false
		for _, p := range nodeLocalProvisioners {
			local = local || sc.Provisioner == p
		}
		if immediate && local {
			return Outcome{Result: Fail,
				Message: fmt.Sprintf("%s's members (%s) get their volumes from StorageClass %s, whose volumes live on one node and are placed before the pods (volumeBindingMode Immediate): two members may be tied to one node, or to a node their spread excludes",
					product, cl.Object, describeClass(sc)),
				Remediation: fmt.Sprintf("use a StorageClass with volumeBindingMode: WaitForFirstConsumer (or network storage) through %s", classField(env.Installation, cl.Component))}, true
		}
	}
	return Outcome{}, false
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
