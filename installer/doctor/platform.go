package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/topology"
	"onprem.dev/onprem/preflight"
)

// databases are the in-cluster database components.
var databases = []string{"mongodb", "postgresql", "redis", "rabbitmq"}

var databaseDown = Analyzer{
	ID:          "database-down",
	Description: "a database does not answer: as the services see it (their /readyz answers) and as its pods are",
	Run: func(in *Input) []Finding {
		var out []Finding
		// The services' view: which dependency does not answer whom.
		down := map[string][]string{}
		var order []string
		for _, h := range in.S.Health {
			if !h.Answered {
				continue
			}
			for _, d := range sortedKeys(h.Deps) {
				if msg := h.Deps[d]; msg != "ok" {
					if down[d] == nil {
						order = append(order, d)
					}
					down[d] = append(down[d], fmt.Sprintf("service %s: %s: %s", h.Service, d, msg))
				}
			}
		}
		for _, d := range order {
			ev := down[d]
			if len(ev) > 6 {
				ev = append(ev[:6], fmt.Sprintf("and %d more services", len(down[d])-6))
			}
			out = append(out, Finding{Severity: Error, Component: d, Object: "database/" + d,
				Title:       fmt.Sprintf("%s does not answer %d platform service(s)", d, len(down[d])),
				Evidence:    ev,
				Remediation: fmt.Sprintf("check %s itself (its pods below, or for an external database its host, port and credentials in spec.databases): the services are ready again as soon as it answers", d)})
		}
		// The database pods' view.
		ns := in.S.Meta.Namespace
		for _, x := range in.S.Objects(ns).StatefulSets {
			comp := componentOf(x.Labels, x.Name)
			if !slices.Contains(databases, comp) {
				continue
			}
			want := int32(1)
			if x.Spec.Replicas != nil {
				want = *x.Spec.Replicas
			}
			if want == 0 || x.Status.ReadyReplicas >= want {
				continue
			}
			// MongoDB's replica set only when a member's answer was
			// collected (a bundle of an older onprem has none).
			mongo := x.Spec.Template.Labels[topology.MongoDBClusterLabel] != "" && in.S.MongoDB != nil
			if (x.Spec.Template.Labels[topology.ClusterLabel] != "" || x.Spec.Template.Labels[topology.RabbitMQClusterLabel] != "" ||
				x.Spec.Template.Labels[topology.RedisClusterLabel] != "" || mongo) && x.Status.ReadyReplicas > 0 {
				continue // a replicated database with members left: database-replication judges it
			}
			out = append(out, Finding{Severity: Error, Component: comp, Object: object("StatefulSet", ns, x.Name),
				Title:       fmt.Sprintf("database %s is down: %d of %d replicas ready", comp, x.Status.ReadyReplicas, want),
				Evidence:    []string{fmt.Sprintf("StatefulSet %s: %d/%d ready; every service that uses %s waits for it", x.Name, x.Status.ReadyReplicas, want, comp)},
				Remediation: "the findings about its pods say why (crash-loop, oom-killed, pvc-pending, volume-full); its data is on its volume and comes back with it"})
		}
		return out
	},
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

var ingress = Analyzer{
	ID:          "ingress",
	Description: "the platform's Ingress routes to a Service with no ready endpoint, or has no address where the configuration expects one (a LoadBalancer controller Service)",
	Run: func(in *Input) []Finding {
		var out []Finding
		ns := in.S.Meta.Namespace
		o := in.S.Objects(ns)
		expectAddress := ingressAddressExpected(in)
		ready := map[string]int{}
		for _, sl := range o.EndpointSlices {
			for _, e := range sl.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ready[sl.Labels[discoveryv1.LabelServiceName]]++
				}
			}
		}
		for _, ing := range o.Ingresses {
			var empty []string
			for _, r := range ing.Spec.Rules {
				if r.HTTP == nil {
					continue
				}
				for _, p := range r.HTTP.Paths {
					if s := p.Backend.Service; s != nil && ready[s.Name] == 0 && !slices.Contains(empty, s.Name) {
						empty = append(empty, s.Name)
					}
				}
			}
			if len(empty) > 0 {
				out = append(out, Finding{Severity: Error, Component: componentOf(ing.Labels, ""), Object: object("Ingress", ns, ing.Name),
					Title:       fmt.Sprintf("Ingress %s routes to %s with no ready pod: requests there fail with 503", ing.Name, strings.Join(empty, ", ")),
					Evidence:    []string{fmt.Sprintf("Service(s) %s: no ready endpoint", strings.Join(empty, ", "))},
					Remediation: "the Service's pods are not ready: see component-unavailable and the findings about those pods"})
			}
			if len(ing.Status.LoadBalancer.Ingress) == 0 && len(ing.Spec.Rules) > 0 && expectAddress {
				out = append(out, Finding{Severity: Warning, Component: componentOf(ing.Labels, ""), Object: object("Ingress", ns, ing.Name),
					Title:       fmt.Sprintf("Ingress %s has no address", ing.Name),
					Evidence:    []string{"status.loadBalancer is empty: the ingress controller has not published an address"},
					Remediation: "check that the ingress controller runs and that its Service got an address (a LoadBalancer needs a load-balancer implementation, e.g. MetalLB on bare metal); or set spec.ingress.serviceType NodePort and point the domain's DNS at the nodes"})
			}
		}
		return out
	},
}

var certificateExpiry = Analyzer{
	ID:          "certificate-expiry",
	Description: "a certificate of the platform expires within 30 days (error within 7, or expired)",
	Run: func(in *Input) []Finding {
		var out []Finding
		for _, c := range in.S.Certificates {
			left := c.NotAfter.Sub(in.Now)
			sev := Severity("")
			switch certs.Judge(in.Now, c.NotAfter) {
			case certs.Error:
				sev = Error
			case certs.Warning:
				sev = Warning
			default:
				continue
			}
			what := "expires in " + left.Round(time.Hour).String()
			if left <= 0 {
				what = "EXPIRED " + since(in.Now, c.NotAfter) + " ago"
			}
			kind := "certificate"
			if c.IsCA {
				kind = "CA certificate"
			}
			out = append(out, Finding{Severity: sev, Object: object("Secret", c.Namespace, c.Secret),
				Title:       fmt.Sprintf("%s %s in Secret %s (%s) %s", kind, c.Subject, c.Secret, c.Key, what),
				Evidence:    []string{fmt.Sprintf("not after %s, issuer %s", c.NotAfter.Format(time.RFC3339), c.Issuer)},
				Remediation: "renew it before it expires: for the operator's own certificate (spec.tls.secretName) replace the Secret's tls.crt and tls.key; for the certificate onprem generated, delete the Secret and run 'onprem install' to generate a new one"})
		}
		return out
	},
}

var staleLock = Analyzer{
	ID:          "stale-lock",
	Description: "onprem's lock is held by a process that is gone (no renewal within its lease)",
	Run: func(in *Input) []Finding {
		ns := in.S.Meta.Namespace
		for _, le := range in.S.Objects(ns).Leases {
			if le.Name != state.LeaseName || le.Spec.HolderIdentity == nil || *le.Spec.HolderIdentity == "" {
				continue
			}
			holder := *le.Spec.HolderIdentity
			var renewed time.Time
			if le.Spec.RenewTime != nil {
				renewed = le.Spec.RenewTime.Time
			} else if le.Spec.AcquireTime != nil {
				renewed = le.Spec.AcquireTime.Time
			}
			lease := state.DefaultLeaseDuration
			if le.Spec.LeaseDurationSeconds != nil {
				lease = time.Duration(*le.Spec.LeaseDurationSeconds) * time.Second
			}
			if in.Now.Sub(renewed) <= lease {
				return []Finding{{Severity: Info, Object: object("Lease", ns, le.Name),
					Title:       "an onprem operation is running now: " + holder,
					Evidence:    []string{fmt.Sprintf("the lock was renewed %s ago (lease %s)", since(in.Now, renewed), lease)},
					Remediation: "wait for it: commands that change the platform wait for the lock"}}
			}
			return []Finding{{Severity: Warning, Object: object("Lease", ns, le.Name),
				Title:       "onprem's lock is held by a process that is gone: " + holder,
				Evidence:    []string{fmt.Sprintf("last renewed %s ago, at %s, for a lease of %s", since(in.Now, renewed), renewed.UTC().Format(time.RFC3339), lease)},
				Remediation: "nothing to delete by hand: the next onprem command takes the lock over. The operation that held it was interrupted: last-operation says how to finish it"}}
		}
		return nil
	},
}

// resumeCommand says how to finish or retry an operation.
func resumeCommand(op *state.Operation) string {
	switch op.Kind {
	case state.KindInstall, state.KindAdopt:
		return "onprem install -c onprem.yaml (it converges from where it stopped)"
	case state.KindUpgrade:
		return fmt.Sprintf("onprem upgrade apply --to %s (completed steps and migrations are not run again)", op.Version)
	case state.KindRollback:
		return "onprem upgrade rollback"
	case state.KindUninstall:
		return "onprem uninstall"
	case state.KindRestore:
		return "onprem restore with the same backup (it finds the unfinished restore and goes on)"
	case state.KindBackup:
		return "onprem backup create"
	case state.KindRotate:
		return "the same 'onprem rotate' command (each Secret is changed in one write, so a re-run starts from what the cluster holds)"
	}
	return "the same onprem command again"
}

var lastOperation = Analyzer{
	ID:          "last-operation",
	Description: "the last operation failed, rolled back, or was interrupted: the command that finishes it",
	Run: func(in *Input) []Finding {
		st := in.S.State
		if st == nil {
			return nil
		}
		var op *state.Operation
		for i := len(st.History) - 1; i >= 0; i-- {
			// Backups are recorded beside the operations that change the
			// platform; a failed backup is job-failed's or status's.
			if st.History[i].Kind != state.KindBackup {
				op = &st.History[i]
				break
			}
		}
		if op == nil {
			return nil
		}
		ev := []string{fmt.Sprintf("%s %s started %s by onprem %s on %s", op.Kind, op.Version, op.Started.UTC().Format(time.RFC3339), op.Installer, op.Host)}
		if op.Message != "" {
			ev = append(ev, op.Message)
		}
		for _, s := range op.Steps {
			if s.Outcome != state.OutcomeSucceeded {
				ev = append(ev, fmt.Sprintf("step %s -> %s: %s (phase %s)", s.From, s.To, s.Outcome, s.Phase))
			}
		}
		obj := object("Secret", in.S.Meta.Namespace, state.SecretName)
		switch op.Outcome {
		case state.OutcomeFailed:
			return []Finding{{Severity: Error, Object: obj, Title: fmt.Sprintf("the last %s (%s) failed", op.Kind, op.Version), Evidence: ev,
				Remediation: "fix what its message says, then run " + resumeCommand(op)}}
		case state.OutcomeRolledBack:
			return []Finding{{Severity: Warning, Object: obj, Title: fmt.Sprintf("the last %s to %s was rolled back: the platform runs %s", op.Kind, op.Version, st.Version), Evidence: ev,
				Remediation: "the platform works at its previous version; fix what the message says, then run " + resumeCommand(op)}}
		case state.OutcomeRunning:
			if lockLive(in) {
				return nil
			}
			return []Finding{{Severity: Error, Object: obj, Title: fmt.Sprintf("the last %s (%s) was interrupted: no onprem process is running it", op.Kind, op.Version), Evidence: ev,
				Remediation: "finish it: " + resumeCommand(op)}}
		}
		return nil
	},
}

func lockLive(in *Input) bool {
	for _, f := range staleLock.Run(in) {
		if f.Severity == Info {
			return true
		}
	}
	return false
}

var nodePressure = Analyzer{
	ID:          "node-pressure",
	Description: "a node is not ready, or is short of memory, disk or process IDs",
	Run: func(in *Input) []Finding {
		var out []Finding
		for _, n := range in.S.Cluster.Nodes {
			for _, c := range n.Status.Conditions {
				bad := false
				switch c.Type {
				case corev1.NodeReady:
					bad = c.Status != corev1.ConditionTrue
				case corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable:
					bad = c.Status == corev1.ConditionTrue
				}
				if !bad {
					continue
				}
				title := fmt.Sprintf("node %s is not ready", n.Name)
				fix := "check the node's kubelet and container runtime; the platform's pods there are rescheduled elsewhere if other nodes have room"
				if c.Type != corev1.NodeReady {
					title = fmt.Sprintf("node %s has %s", n.Name, c.Type)
					fix = "the kubelet evicts pods from a node under pressure: free memory or disk there (old images, logs), or add capacity; cluster/nodes.json and cluster/allocated.json have its capacity and what is scheduled there"
				}
				ev := []string{fmt.Sprintf("%s=%s since %s: %s %s", c.Type, c.Status, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Reason, c.Message)}
				if a, ok := in.S.Cluster.Allocated[n.Name]; ok {
					ev = append(ev, fmt.Sprintf("requested cpu %s of %s allocatable, memory %s of %s", qty(a, corev1.ResourceCPU), qty(n.Status.Allocatable, corev1.ResourceCPU),
						qty(a, corev1.ResourceMemory), qty(n.Status.Allocatable, corev1.ResourceMemory)))
				}
				out = append(out, Finding{Severity: Error, Object: object("Node", "", n.Name), Title: title, Evidence: ev, Remediation: fix})
			}
		}
		return out
	},
}

func qty(l corev1.ResourceList, r corev1.ResourceName) string {
	if q, ok := l[r]; ok {
		return q.String()
	}
	return "?"
}

var releaseFailed = Analyzer{
	ID:          "helm-release",
	Description: "a component's last Helm release failed or was left pending",
	Run: func(in *Input) []Finding {
		var out []Finding
		for _, r := range in.S.Releases {
			last := r.Last()
			if last == nil || (last.Status != "failed" && !strings.HasPrefix(last.Status, "pending")) {
				continue
			}
			out = append(out, Finding{Severity: Error, Component: r.Name, Object: fmt.Sprintf("HelmRelease/%s/%s", r.Namespace, r.Name),
				Title:       fmt.Sprintf("the Helm release %s (revision %d, %s %s) is %s", r.Name, last.Revision, last.Chart, last.ChartVersion, last.Status),
				Evidence:    []string{last.Description},
				Remediation: "run 'onprem install' (or the upgrade that was running) again: it takes over a pending release and applies the component again"})
		}
		return out
	},
}

var attachments = Analyzer{
	ID:          "attachments",
	Description: "a runner, runtime, Git source or managed cluster is unreachable or unhealthy",
	Run: func(in *Input) []Finding {
		a := in.S.Attachments
		if a == nil {
			return nil
		}
		var out []Finding
		for _, r := range a.Runners {
			if r.Ready {
				continue
			}
			why := r.Problem
			if why == "" {
				why = fmt.Sprintf("agent %d/%d, engine %d/%d ready", r.Agent.Ready, r.Agent.Desired, r.Engine.Ready, r.Engine.Desired)
			}
			out = append(out, Finding{Severity: Error, Object: "Runner/" + r.Name, Title: fmt.Sprintf("runner %s is not ready", r.Name),
				Evidence: []string{why, "recorded: " + r.Recorded}, Remediation: "'onprem runner list' shows it; 'onprem runner upgrade " + r.Name + "' applies it again"})
		}
		for _, r := range a.Runtimes {
			if r.Ready {
				continue
			}
			ev := []string{"recorded: " + r.Recorded}
			if r.Problem != "" {
				ev = append(ev, r.Problem)
			}
			for _, w := range sortedKeys(r.Workloads) {
				ev = append(ev, fmt.Sprintf("%s %s ready", w, r.Workloads[w]))
			}
			out = append(out, Finding{Severity: Error, Object: "Runtime/" + r.Name, Title: fmt.Sprintf("runtime %s is not ready", r.Name),
				Evidence: ev, Remediation: "'onprem runtime list' shows it; 'onprem runtime upgrade " + r.Name + "' applies it again"})
		}
		for _, g := range a.GitSources {
			if g.Health == "" || g.Health == "Healthy" || g.Health == "Progressing" {
				continue
			}
			out = append(out, Finding{Severity: Warning, Object: "GitSource/" + g.Name, Title: fmt.Sprintf("Git source %s of runtime %s is %s (sync %s)", g.Name, g.Runtime, g.Health, g.Sync),
				Evidence: []string{g.URL}, Remediation: "open the runtime's Argo CD application for the reason; a missing Git token shows as a sync error"})
		}
		for _, rt := range sortedKeys(a.ManagedClusters) {
			for _, c := range a.ManagedClusters[rt] {
				if c.Health == "Healthy" {
					continue
				}
				out = append(out, Finding{Severity: Warning, Object: "ManagedCluster/" + c.Name, Title: fmt.Sprintf("managed cluster %s of runtime %s is %s", c.Name, rt, c.Health),
					Evidence: []string{c.Message}, Remediation: "'onprem runtime cluster add " + c.Name + " --runtime " + rt + "' registers it again with a fresh token"})
			}
		}
		return out
	},
}

var preflightChecks = Analyzer{
	ID:          "preflight",
	Description: "a preflight check fails or warns against the cluster as it is now",
	Run: func(in *Input) []Finding {
		if in.S.Preflight == nil {
			return nil
		}
		var out []Finding
		for _, f := range in.S.Preflight.Findings {
			sev := Severity("")
			switch f.Result {
			case preflight.Fail:
				sev = Error
			case preflight.Warn:
				sev = Warning
			}
			if sev == "" {
				continue
			}
			out = append(out, Finding{Severity: sev, Object: "PreflightCheck/" + f.ID, Title: fmt.Sprintf("preflight check %s: %s", f.ID, f.Message),
				Evidence: f.Details, Remediation: f.Remediation})
		}
		return out
	},
}
