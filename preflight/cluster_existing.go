package preflight

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/upgrade"
)

const installationExistingID = "installation.existing"

// installationExistingCheck reads the installation's state record: the
// target version must be the installed one (a re-run) or reachable from it
// along the release graph (no downgrade), and an operation left running by
// an onprem that stopped is reported.
func installationExistingCheck() Check {
	return Check{
		ID:       installationExistingID,
		Title:    "the installed platform version (if any) can be upgraded to the target along the release graph",
		Severity: Blocking,
		Run:      runInstallationExisting,
	}
}

// leaseExpiry is when the lock's holder loses it if it stops renewing.
func leaseExpiry(le *coordinationv1.Lease) time.Time {
	last := le.CreationTimestamp.Time
	if le.Spec.AcquireTime != nil {
		last = le.Spec.AcquireTime.Time
	}
	if le.Spec.RenewTime != nil {
		last = le.Spec.RenewTime.Time
	}
	d := state.DefaultLeaseDuration
	if le.Spec.LeaseDurationSeconds != nil && *le.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*le.Spec.LeaseDurationSeconds) * time.Second
	}
	return last.Add(d)
}

func runInstallationExisting(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Blocking, "cluster", "release"); !ok {
		return out
	}
	if env.Releases == nil {
		return missingInput(Blocking, "the set of known releases")
	}
	ns := platformNamespace(env)
	st, err := state.NewStore(env.Cluster.Client, ns).Load(ctx)
	var corrupt *state.CorruptError
	if errors.As(err, &corrupt) {
		return Outcome{Result: Fail, Message: corrupt.Error(),
			Remediation: fmt.Sprintf("look at the Secret with the command above; if it is not onprem's, install into another namespace (spec.namespace); if it is onprem's and damaged, restore it from a backup before running onprem again")}
	}
	if err != nil {
		return cannotRun(Blocking, installationExistingID, fmt.Sprintf("read the state record (Secret %s/%s)", ns, state.SecretName), err)
	}
	target := env.Release.Version

	var f findings
	switch installed := st.Version; {
	case installed == "":
		if st.Stored() && len(st.History) > 0 {
			last := st.History[len(st.History)-1]
			f.ok("no platform version is installed in %s (last operation: %s %s, %s): a fresh install of %s", ns, last.Kind, last.Version, last.Outcome, target)
		} else {
			f.ok("no installation in namespace %s: a fresh install of %s", ns, target)
		}
	case installed == target:
		f.ok("platform %s is installed: this is a re-run, which changes only what differs", installed)
	default:
		path, err := upgrade.Path(env.Releases, installed, target)
		var down *upgrade.DowngradeError
		var noPath *upgrade.NoPathError
		var unknown *upgrade.UnknownVersionError
		switch {
		case errors.As(err, &down):
			f.problem(Fail, fmt.Sprintf("platform %s is installed and the target %s is older: onprem does not downgrade", installed, target),
				fmt.Sprintf("set spec.version to %s (or newer) in onprem.yaml; to undo the last upgrade use 'onprem rollback'", installed))
		case errors.As(err, &noPath):
			f.problem(Fail, fmt.Sprintf("platform %s is installed: %v", installed, noPath),
				"upgrade in steps: set spec.version to the intermediate version named above, upgrade, then to the target ('onprem upgrade plan' shows the path)")
		case errors.As(err, &unknown):
			f.problem(Fail, fmt.Sprintf("the state record says %v", unknown),
				"use the onprem (or a bundle) that knows the installed version's release")
		case err != nil:
			f.problem(Fail, fmt.Sprintf("cannot find an upgrade path from %s to %s: %v", installed, target, err),
				"run 'onprem upgrade plan' for details")
		default:
			steps := ""
			for i, r := range path {
				if i > 0 {
					steps += " → "
				}
				steps += r.Version
			}
			f.ok("platform %s is installed; the upgrade to %s goes %s → %s", installed, target, installed, steps)
		}
	}

	if op := st.Running(); op != nil {
		le, err := env.Cluster.Client.CoordinationV1().Leases(ns).Get(ctx, state.LeaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && (le.Spec.HolderIdentity == nil || *le.Spec.HolderIdentity == "")),
			err == nil && !leaseExpiry(le).After(env.Now()):
			f.problem(Warn, fmt.Sprintf("a previous onprem was interrupted: its %s of %s (operation %s, started %s on %s) is still marked running and nobody holds the lock",
				op.Kind, op.Version, op.ID, op.Started.UTC().Format(time.RFC3339), op.Host),
				"nothing to do: the next install or upgrade takes the lock over, records that operation as interrupted and finishes the work; 'onprem status' shows what it left")
		case err != nil:
			return cannotRun(Blocking, installationExistingID, fmt.Sprintf("read the lock (Lease %s/%s)", ns, state.LeaseName), err)
		default:
			f.problem(Warn, fmt.Sprintf("another onprem is working on this installation now: its %s of %s (operation %s) is running and %s holds the lock until %s",
				op.Kind, op.Version, op.ID, *le.Spec.HolderIdentity, leaseExpiry(le).UTC().Format(time.RFC3339)),
				"wait for it to finish ('onprem status' shows its progress); the install waits for the lock and gives up if it is not released in time")
		}
	}
	return f.outcome()
}
