package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/upgrade"
)

func newUpgradeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Plan and apply versioned upgrades of the platform",
		Long: `Upgrade the installed platform to a newer version, one release at a time.

The path goes from the installed version (recorded in the cluster) to the
target (--to, or spec.version of onprem.yaml) through the releases each one
may be upgraded from. A release marked required is never skipped; there is
no downgrade (see 'onprem rollback' to undo a step).

  onprem upgrade plan    what each step changes, and a diff against the cluster
  onprem upgrade apply   run the steps: backups, migrations, components, with
                         automatic rollback of a step that fails`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newUpgradePlanCmd(), newUpgradeApplyCmd())
	return cmd
}

func addUpgradeTargetFlags(cmd *cobra.Command, t *action.UpgradeTarget) {
	addSourceFlags(cmd, &t.Source)
	addBundleFlags(cmd, &t.Source)
	addClusterFlags(cmd, &t.Cluster)
	cmd.Flags().StringVar(&t.To, "to", "", "target version (default: spec.version of the configuration); see 'onprem versions'")
	cmd.Flags().StringArrayVar(&t.Set, "set", nil, "override a value in every step: COMPONENT.key=value (repeatable)")
}

func newUpgradePlanCmd() *cobra.Command {
	a := &action.UpgradePlan{}
	var format string
	var showDiff bool
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show the upgrade path and what every step changes; change nothing",
		Long: `Print the path from the installed version to the target, then for each step:
the components added, removed and changed (chart version, images, the Helm
value paths that change), the migrations that will run and what is backed
up before each, and the object-level diff (against the live cluster for
the first step, against the previous step for the others). Secret values
never appear.

--server-dry-run rehearses every step's apply on the API server (admission
included) without changing anything.

Exit codes: 0 plan shown, 1 the dry run was refused, 2 bad input (a --to
that does not exist or is older than the installed version: the message
lists the versions reachable), 3 cluster unreachable.`,
		Example: `  onprem upgrade plan -c onprem.yaml --to 2.8.0
  onprem upgrade plan -c onprem.yaml --to 2.8.0 --diff
  onprem upgrade plan -c onprem.yaml --server-dry-run -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			res, err := a.Run(cmd.Context())
			return writeAnyway(cmd, format, res, err, func(w io.Writer) { printPlan(w, res, showDiff) })
		},
	}
	addUpgradeTargetFlags(cmd, &a.UpgradeTarget)
	cmd.Flags().BoolVar(&a.ServerDryRun, "server-dry-run", false, "rehearse every step's apply on the API server; change nothing")
	cmd.Flags().IntVar(&a.Concurrency, "concurrency", apply.DefaultConcurrency, "components rehearsed at once")
	cmd.Flags().BoolVar(&showDiff, "diff", false, "print the object-level diffs too (always in -o json|yaml)")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "result on stdout: table, json or yaml")
	return cmd
}

func printPlan(w io.Writer, res *action.UpgradePlanResult, showDiff bool) {
	p := res.Plan
	if len(p.Steps) == 0 {
		fmt.Fprintf(w, "platform %s in namespace %s: nothing to upgrade (target %s)\n", p.From, res.Namespace, p.To)
		return
	}
	path := []string{p.From}
	for _, s := range p.Steps {
		path = append(path, s.To)
	}
	fmt.Fprintf(w, "upgrade path for namespace %s: %s\n", res.Namespace, strings.Join(path, " → "))
	for i, s := range p.Steps {
		req := ""
		if s.Required {
			req = " (required stop)"
		}
		fmt.Fprintf(w, "\nstep %d/%d: %s → %s%s\n", i+1, len(p.Steps), s.From, s.To, req)
		if s.Notes != "" {
			fmt.Fprintf(w, "  %s\n", s.Notes)
		}
		tw := output.NewTable(w)
		fmt.Fprintln(tw, "  COMPONENT\tCHANGE\tCHART\tOBJECTS\tIMAGES / VALUES")
		for _, c := range s.Components {
			if c.Change == upgrade.ComponentUnchanged {
				continue
			}
			chart := c.ToChart
			if c.FromChart != c.ToChart {
				chart = strings.TrimSpace(c.FromChart + " → " + c.ToChart)
			}
			var what []string
			for _, im := range c.Images {
				what = append(what, fmt.Sprintf("%s: %s → %s", im.Container, dash(im.From), dash(im.To)))
			}
			if len(c.Values) > 0 {
				what = append(what, "values: "+strings.Join(c.Values, ", "))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", c.Name, c.Change, dash(chart), c.Objects, strings.Join(what, "; "))
		}
		tw.Flush()
		unchanged := 0
		for _, c := range s.Components {
			if c.Change == upgrade.ComponentUnchanged {
				unchanged++
			}
		}
		if unchanged > 0 {
			fmt.Fprintf(w, "  (%d components unchanged)\n", unchanged)
		}
		for _, m := range s.Migrations {
			done := ""
			if m.Done {
				done = " — already completed, will not run again"
			}
			bk := "nothing"
			if len(m.Backups) > 0 {
				bk = strings.Join(m.Backups, ", ")
			}
			fmt.Fprintf(w, "  migration %s (%s, timeout %s): backs up %s first%s\n", m.Name, m.Component, m.Timeout, bk, done)
		}
		if showDiff {
			for _, dc := range s.Diff {
				for _, o := range dc.Objects {
					fmt.Fprint(w, o.Diff)
				}
			}
		} else if len(s.Diff) > 0 {
			n := 0
			for _, dc := range s.Diff {
				n += len(dc.Objects)
			}
			fmt.Fprintf(w, "  %d objects differ (--diff to show them)\n", n)
		}
	}
	for _, d := range res.DryRun {
		state := "accepted by the API server"
		if d.Error != "" {
			state = "REFUSED: " + d.Error
		}
		fmt.Fprintf(w, "\nserver dry run of step %s: %s\n", d.Step, state)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newUpgradeApplyCmd() *cobra.Command {
	a := &action.UpgradeApply{}
	var format string
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Upgrade the platform along the path, rolling a failed step back",
		Long: `Upgrade the installed platform to the target version (--to, or spec.version).

It takes the installation's lock, runs the preflight checks against the
target (nothing is touched if one fails), then for each step of the path
(see 'onprem upgrade plan'):

  0. with spec.backup, writes a backup of the whole platform to its bucket
     ('onprem backup --help'; --skip-backup leaves it out),
  1. backs up what the step's migrations touch (mongodump / pg_dump as Jobs,
     written to the claim onprem-backups; the path is recorded in the state),
  2. runs the migrations as Jobs, in order,
  3. upgrades the components in dependency order, waiting for each (a
     component the step does not change is applied again only if its live
     objects drifted from onprem's, as 'onprem install' does: "repaired"),
  4. removes the components the release dropped (their Helm history is kept),
  5. records the step.

With spec.availability high, step 3 replaces the members of the replicated
PostgreSQL and Redis itself, one at a time: the replicas first, each
evicted and waited for until its replacement is ready, then the primary,
which hands its role to an updated replica (one switchover per database;
the progress names each member replaced; docs/availability.md).

If a migration Job fails or a component does not become ready, every
component the step changed is rolled back to its Helm revision from before
the step, the failure and the rollback are recorded, and the command exits
1 saying what failed and why. Nothing is uninstalled to recover.

A component fails at once, without waiting for --timeout, when its pods show
a failure that waiting cannot fix (an image the registry says does not exist
or refuses, an invalid image reference, a missing Secret key, pods refused by
admission, a Job past its backoff limit, a crash loop with one exit code),
named as 'onprem doctor' names it; the components waiting beside it stop
and the rollback starts. Transient failures (an unreachable registry, a slow
pull, a pod waiting for capacity) are waited for until --timeout, and the
progress line says what each component waits for ("0/1 ready, pulling image
(35 s)"). Each rollback waits about
as long as the component's own last apply took (half again, at least 60s,
at most --timeout).

If onprem is killed mid-way, run the same command again: it resumes the
interrupted step (completed migrations do not run again). Or run
'onprem rollback' to return to the version before that step.

Exit codes: 0 upgraded (or nothing to do), 1 a step failed (rolled back),
2 bad input (unknown or older --to, no installation recorded), 3 cluster
unreachable.`,
		Example: `  onprem upgrade apply -c onprem.yaml --to 2.8.0
  onprem upgrade apply -c onprem.yaml            # to spec.version
  onprem upgrade apply -c onprem.yaml --to 2.8.0 -o json
  # air-gapped: one pushed bundle per version of the path
  onprem upgrade apply -c onprem.yaml --to 2.8.0 --bundle platform-2.7.0.bundle --bundle platform-2.8.0.bundle`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			a.Preflight = printPreflightSummary(stderr)
			a.Reporter = apply.NewLineReporter(stderr)
			a.Progress = progressLines(stderr)
			a.BackupProgress = backupProgress(stderr)
			res, err := a.Run(cmd.Context())
			return writeAnyway(cmd, format, res, err, func(w io.Writer) { printUpgrade(w, res) })
		},
	}
	addUpgradeTargetFlags(cmd, &a.UpgradeTarget)
	cmd.Flags().StringArrayVar(&a.SkipChecks, "skip-check", nil, "skip this preflight check (repeatable; recorded in the state)")
	cmd.Flags().IntVar(&a.Concurrency, "concurrency", apply.DefaultConcurrency, "components applied at once")
	cmd.Flags().DurationVar(&a.Timeout, "timeout", apply.DefaultTimeout, "how long each component may take to become ready (a failure that waiting cannot fix ends the wait at once); a rollback waits about as long as the component's last apply took, at most this")
	cmd.Flags().StringVar(&a.BackupSize, "backup-size", upgrade.DefaultBackupSize, "size of the backup claim onprem-backups when it is first created")
	cmd.Flags().BoolVar(&a.SkipBackup, "skip-backup", false, "do not write the backup of the whole platform that spec.backup asks for before each step")
	addLockFlags(cmd, &a.LockWait, &a.LockLease)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "result on stdout: table, json or yaml")
	return cmd
}

func printUpgrade(w io.Writer, res *action.UpgradeResult) {
	if res.Result == nil || len(res.Steps) == 0 {
		if res.Preflight == nil || !res.Preflight.Failed() {
			fmt.Fprintf(w, "platform %s in namespace %s: nothing to upgrade\n", res.Version, res.Namespace)
		}
		return
	}
	for _, s := range res.Steps {
		fmt.Fprintf(w, "step %s → %s: %s\n", s.From, s.To, s.Outcome)
		for _, b := range s.Backups {
			fmt.Fprintf(w, "  backup of %s %s: %s:%s\n", b.Service, b.Engine, b.Claim, b.Path)
		}
		for _, m := range s.Migrations {
			fmt.Fprintf(w, "  migration %s completed\n", m)
		}
		if len(s.Applied) > 0 {
			fmt.Fprintf(w, "  upgraded: %s\n", strings.Join(s.Applied, ", "))
		}
		for _, c := range s.Components {
			for _, r := range c.Repaired {
				fmt.Fprintf(w, "  repaired: %s\n", r)
			}
		}
		if len(s.Removed) > 0 {
			fmt.Fprintf(w, "  removed: %s\n", strings.Join(s.Removed, ", "))
		}
		if len(s.RolledBack) > 0 {
			fmt.Fprintf(w, "  rolled back: %s\n", strings.Join(s.RolledBack, ", "))
		}
	}
	fmt.Fprintf(w, "platform in namespace %s is at %s (%s)\n", res.Namespace, res.Version, round(res.Elapsed))
}

func newRollbackCmd() *cobra.Command {
	a := &action.Rollback{}
	var format string
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Undo the last upgrade step",
		Long: `Undo the last upgrade step that was completed or interrupted: every component
the step changed returns to its Helm revision from before the step
(components the step removed are restored; components it added are left
in place: a rollback never uninstalls), and the recorded version becomes
the step's starting version. Run it again to undo the step before.

Data migrated by the step is not reverted: the output names the backups
taken before the step's migrations (files on the claim onprem-backups).

A failed 'onprem upgrade apply' rolls its step back by itself; use this
command after an interrupted upgrade, or to leave a version that turned out
badly after it was installed.`,
		Example: `  onprem rollback -c onprem.yaml
  onprem rollback --namespace onprem -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			a.Progress = progressLines(cmd.ErrOrStderr())
			res, err := a.Run(cmd.Context())
			return writeAnyway(cmd, format, res, err, func(w io.Writer) {
				fmt.Fprintf(w, "rolled back %s → %s in namespace %s\n", res.From, res.To, res.Namespace)
				if len(res.RolledBack) > 0 {
					fmt.Fprintf(w, "  components returned to their earlier revision: %s\n", strings.Join(res.RolledBack, ", "))
				}
				if len(res.Kept) > 0 {
					fmt.Fprintf(w, "  left in place (new in %s): %s\n", res.From, strings.Join(res.Kept, ", "))
				}
				for _, b := range res.Backups {
					fmt.Fprintf(w, "  data from before the step: %s %s backup at %s:%s\n", b.Service, b.Engine, b.Claim, b.Path)
				}
			})
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	addTargetFlags(cmd, &a.Target)
	cmd.Flags().DurationVar(&a.Timeout, "timeout", apply.DefaultTimeout, "how long each component may take to become ready again (each waits about as long as its own last apply took, half again, at least 60s, at most this)")
	addLockFlags(cmd, &a.LockWait, &a.LockLease)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "result on stdout: table, json or yaml")
	return cmd
}

func newAdoptCmd() *cobra.Command {
	a := &action.Adopt{}
	var format string
	cmd := &cobra.Command{
		Use:   "adopt",
		Short: "Take over a platform installed with plain Helm releases",
		Long: `Record a platform that was installed with plain Helm releases of the same
components (release names = component names, in spec.namespace) as an
onprem installation of spec.version, without changing anything, so that
'onprem upgrade' can upgrade it from then on.

It checks first, and records nothing if any check fails (each problem is
listed with its fix):
  - every component the configuration installs has a deployed release of
    the chart and chart version of that platform version;
  - every secret onprem would generate exists with its keys (otherwise the
    next install would generate new passwords that the data does not
    accept: create them from the credentials the platform uses).

Exit codes: 0 adopted, 2 cannot adopt as it is (the list says why), 3
cluster unreachable.`,
		Example: `  onprem adopt -c onprem.yaml
  onprem adopt -c onprem.yaml && onprem upgrade plan -c onprem.yaml --to 2.8.0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			res, err := a.Run(cmd.Context())
			return writeAnyway(cmd, format, res, err, func(w io.Writer) {
				writeTable(w, "COMPONENT\tCHART\tREVISION", res.Components, func(c action.AdoptedComponent) string {
					return fmt.Sprintf("%s\t%s\t%d", c.Name, c.Chart, c.Revision)
				})
				fmt.Fprintf(w, "adopted platform %s in namespace %s: %d releases recorded, nothing changed\n", res.Version, res.Namespace, len(res.Components))
				if len(res.Pending) > 0 {
					fmt.Fprintf(w, "the next install or upgrade also installs: %s\n", strings.Join(res.Pending, ", "))
				}
			})
		},
	}
	addSourceFlags(cmd, &a.Source)
	addClusterFlags(cmd, &a.Cluster)
	addLockFlags(cmd, &a.LockWait, &a.LockLease)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "result on stdout: table, json or yaml")
	return cmd
}
