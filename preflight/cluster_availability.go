package preflight

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/config"
)

const availabilityID = "availability"

// MinHANodes is how many schedulable nodes spec.availability high needs:
// PostgreSQL's three members each on a node of their own, so that losing
// one node loses one member.
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
		Title:    "with spec.availability high: three schedulable nodes or more (a warning when all are in one zone), and volumes that can be placed on each member's node",
		Severity: Blocking,
		Run:      runAvailability,
	}
}

func runAvailability(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Blocking, "cluster", "installation", "rendered"); !ok {
		return out
	}
	in := env.Installation
	if in.Spec.Availability != config.AvailabilityHigh {
		return Passed("spec.availability is %s: nothing to check", orDefault(in.Spec.Availability, config.DefaultAvailability))
	}
	cs := env.Cluster.Client
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cannotRun(Blocking, availabilityID, "list nodes", err)
	}
	var usable []*corev1.Node
	var excluded []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if why := nodeExclusion(n, in.Spec.Placement); why != "" {
			excluded = append(excluded, n.Name+" ("+why+")")
			continue
		}
		usable = append(usable, n)
	}
	sort.Strings(excluded)
	if len(usable) < MinHANodes {
		msg := fmt.Sprintf("spec.availability is high, which needs %d schedulable nodes or more (one per PostgreSQL member, so that losing a node loses one), and the platform's pods can run on %d",
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

// haStorage fails when a replicated database's volumes would come from a
// StorageClass that binds node-local volumes before scheduling.
func haStorage(ctx context.Context, env *Env) (Outcome, bool) {
	for _, cl := range renderedClaims(env) {
		if cl.Component != "postgresql" {
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
				Message: fmt.Sprintf("PostgreSQL's members (%s) get their volumes from StorageClass %s, whose volumes live on one node and are placed before the pods (volumeBindingMode Immediate): two members may be tied to one node, or to a node their spread excludes",
					cl.Object, describeClass(sc)),
				Remediation: fmt.Sprintf("use a StorageClass with volumeBindingMode: WaitForFirstConsumer (or network storage) through %s", classField(env.Installation, "postgresql"))}, true
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
