package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/installer/support"
	"onprem.dev/onprem/preflight"
)

// Source is what the pages show and do: the CLI's actions.
type Source interface {
	Status(ctx context.Context) (*action.StatusResult, error)
	Component(ctx context.Context, name string) (*action.ComponentDetail, error)
	// Preflight runs the checks; a report comes back with an error when
	// checks failed.
	Preflight(ctx context.Context) (*preflight.Report, error)
	// Attachments lists the runners and runtimes with their health.
	Attachments(ctx context.Context) (*Attachments, error)

	// UpgradeVersions lists the versions reachable from the installed one.
	UpgradeVersions(ctx context.Context) (*action.UpgradeVersionsResult, error)
	// UpgradePlan plans an upgrade to a version; it changes nothing.
	UpgradePlan(ctx context.Context, to string) (*action.UpgradePlanResult, error)
	// Upgrade upgrades to a version ('onprem upgrade apply'), telling p.
	Upgrade(ctx context.Context, to string, p Progress) error

	// Configuration is the configuration file and its effective form.
	Configuration(ctx context.Context) (*Configuration, error)
	// CheckConfiguration validates an edited copy of the file and, when it
	// is valid, diffs what installing it would change. It changes nothing.
	CheckConfiguration(ctx context.Context, text []byte) (*ConfigCheck, error)
	// ApplyConfiguration writes the edited copy over the file and installs
	// it ('onprem install'), telling p.
	ApplyConfiguration(ctx context.Context, text []byte, p Progress) error

	// SupportBundle writes a support bundle into dir and returns its path.
	SupportBundle(ctx context.Context, dir string) (string, error)
	// Backups lists the installation's backups in its configured bucket.
	Backups(ctx context.Context) (*action.BackupListResult, error)
}

// Progress is told what a long operation does: lines for humans and each
// component's state changes.
type Progress interface {
	Line(text string)
	Component(e apply.Event)
}

// Attachments are the runners and runtimes of the installation, as 'onprem
// runner list' and 'onprem runtime list' read them.
type Attachments struct {
	Runners  *action.RunnerListResult
	Runtimes *action.RuntimeListResult
}

// Configuration is the configuration file as written and as onprem reads
// it.
type Configuration struct {
	Path string
	// Text is the file. When it holds values shaped like secrets they are
	// redacted here and Redacted is true: such a file is edited in an
	// editor, not in the console.
	Text     string
	Redacted bool
	// Effective is the configuration with defaults, environment and flags
	// applied (YAML, redacted like Text).
	Effective string
	// Digest identifies Text (sha256), so that what is applied is what was
	// shown.
	Digest string
}

// ConfigCheck is the validation of an edited configuration.
type ConfigCheck struct {
	// Problems are every field error with its line; Invalid is any other
	// reason the copy was refused.
	Problems config.Errors
	Invalid  string
	// Diff is what installing the copy would change (when valid);
	// DiffError says why that could not be computed.
	Diff      *action.DiffResult
	DiffError string
	// Digest identifies the checked text: applying needs it.
	Digest string
}

// Valid reports whether the copy has no problem.
func (c *ConfigCheck) Valid() bool { return len(c.Problems) == 0 && c.Invalid == "" }

// Digest is the digest the console gives a configuration text.
func Digest(text []byte) string {
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:])
}

// Actions is the Source of an installation, through installer/action.
type Actions struct {
	Target action.Target
	// Bundles, PublicKeys and AllowUnsigned (as for action.Source) are air-gapped bundles whose releases join the
	// embedded ones (upgrades, preflight, install).
	Bundles       []string
	PublicKeys    []string
	AllowUnsigned bool
	// Timeout bounds each component's apply and wait in upgrades and
	// installs (default: apply's).
	Timeout time.Duration
	// LockWait is how long an operation waits for the installation's lock
	// (default: a second: the page says who holds it).
	LockWait time.Duration
}

func (a Actions) source() action.Source {
	return action.Source{ConfigPath: a.Target.ConfigPath, Bundles: a.Bundles, PublicKeys: a.PublicKeys, AllowUnsigned: a.AllowUnsigned}
}

func (a Actions) lockWait() time.Duration {
	if a.LockWait > 0 {
		return a.LockWait
	}
	return time.Second
}

// Status is 'onprem status'.
func (a Actions) Status(ctx context.Context) (*action.StatusResult, error) {
	return (&action.Status{Target: a.Target}).Run(ctx)
}

// Component is one component's pods, events, logs and Helm history.
func (a Actions) Component(ctx context.Context, name string) (*action.ComponentDetail, error) {
	return (&action.ComponentInspect{Target: a.Target, Name: name}).Run(ctx)
}

// Preflight is 'onprem preflight' with the configuration of Target's
// ConfigPath.
func (a Actions) Preflight(ctx context.Context) (*preflight.Report, error) {
	return (&action.Preflight{Source: a.source(), Cluster: a.Target.Cluster}).Run(ctx)
}

// Attachments is 'onprem runner list' and 'onprem runtime list'.
func (a Actions) Attachments(ctx context.Context) (*Attachments, error) {
	runners, err := (&action.RunnerList{Target: a.Target}).Run(ctx)
	if err != nil {
		return nil, err
	}
	runtimes, err := (&action.RuntimeList{Target: a.Target}).Run(ctx)
	if err != nil {
		return nil, err
	}
	return &Attachments{Runners: runners, Runtimes: runtimes}, nil
}

func (a Actions) upgradeTarget(to string) action.UpgradeTarget {
	return action.UpgradeTarget{Source: a.source(), Cluster: a.Target.Cluster, To: to}
}

// UpgradeVersions is where 'onprem upgrade' can go.
func (a Actions) UpgradeVersions(ctx context.Context) (*action.UpgradeVersionsResult, error) {
	return (&action.UpgradeVersions{UpgradeTarget: a.upgradeTarget("")}).Run(ctx)
}

// UpgradePlan is 'onprem upgrade plan --to'.
func (a Actions) UpgradePlan(ctx context.Context, to string) (*action.UpgradePlanResult, error) {
	return (&action.UpgradePlan{UpgradeTarget: a.upgradeTarget(to)}).Run(ctx)
}

// Upgrade is 'onprem upgrade apply --to'.
func (a Actions) Upgrade(ctx context.Context, to string, p Progress) error {
	u := &action.UpgradeApply{UpgradeTarget: a.upgradeTarget(to), Timeout: a.Timeout, LockWait: a.lockWait(),
		Reporter: reporter{p}, Progress: p.Line, Preflight: preflightLines(p)}
	res, err := u.Run(ctx)
	if res != nil && err == nil {
		p.Line(fmt.Sprintf("platform in namespace %s is at %s (%s)", res.Namespace, res.Version, res.Elapsed.Round(time.Second)))
	}
	return err
}

// Configuration reads the file and its effective form.
func (a Actions) Configuration(ctx context.Context) (*Configuration, error) {
	raw, err := os.ReadFile(a.Target.ConfigPath)
	if err != nil {
		return nil, fmt.Errorf("reading the configuration the console was started with: %w", err)
	}
	out := &Configuration{Path: a.Target.ConfigPath, Digest: Digest(raw)}
	red := support.NewRedactor(nil)
	out.Text = red.Redact(string(raw))
	out.Redacted = out.Text != string(raw)
	l, err := (&action.ConfigValidate{Source: a.source()}).Run(ctx)
	if err != nil {
		return out, err
	}
	l.Close()
	var b bytes.Buffer
	if err := output.Encode(&b, output.YAML, l.Installation); err != nil {
		return out, err
	}
	out.Effective = red.Redact(b.String())
	return out, nil
}

// CheckConfiguration validates text as the configuration file (in the
// file's folder, so that relative paths mean the same) and diffs it
// against the cluster.
func (a Actions) CheckConfiguration(ctx context.Context, text []byte) (*ConfigCheck, error) {
	out := &ConfigCheck{Digest: Digest(text)}
	path, cleanup, err := a.copyBeside(text)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	src := a.source()
	src.ConfigPath = path
	l, err := (&action.ConfigValidate{Source: src}).Run(ctx)
	if err != nil {
		var es config.Errors
		var fe *config.FieldError
		switch {
		case errors.As(err, &es):
			out.Problems = es
		case errors.As(err, &fe):
			out.Problems = config.Errors{*fe}
		default:
			out.Invalid = err.Error()
		}
		for i := range out.Problems {
			out.Problems[i].File = filepath.Base(a.Target.ConfigPath)
		}
		return out, nil
	}
	l.Close()
	d, err := (&action.Diff{Source: src, Cluster: a.Target.Cluster}).Run(ctx)
	if err != nil {
		out.DiffError = err.Error()
	}
	out.Diff = d
	return out, nil
}

// copyBeside writes text next to the configuration file, for reading it
// as the file would be read.
func (a Actions) copyBeside(text []byte) (string, func(), error) {
	f, err := os.CreateTemp(filepath.Dir(a.Target.ConfigPath), ".onprem-console-*.yaml")
	if err != nil {
		return "", nil, fmt.Errorf("writing the edited configuration beside %s to check it: %w", a.Target.ConfigPath, err)
	}
	cleanup := func() { _ = os.Remove(f.Name()) }
	if _, err := f.Write(text); err != nil {
		f.Close()
		cleanup()
		return "", nil, err
	}
	if err := f.Close(); err != nil {
		cleanup()
		return "", nil, err
	}
	return f.Name(), cleanup, nil
}

// ApplyConfiguration writes text over the configuration file (atomically,
// keeping its mode) and runs 'onprem install' with it.
func (a Actions) ApplyConfiguration(ctx context.Context, text []byte, p Progress) error {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(a.Target.ConfigPath); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := action.WriteFileAtomic(a.Target.ConfigPath, text, mode); err != nil {
		return fmt.Errorf("writing %s: %w", a.Target.ConfigPath, err)
	}
	p.Line("wrote " + a.Target.ConfigPath)
	in := &action.Install{Source: a.source(), Cluster: a.Target.Cluster, Timeout: a.Timeout, LockWait: a.lockWait(),
		Reporter: reporter{p}, Preflight: preflightLines(p)}
	res, err := in.Run(ctx)
	if res != nil && err == nil {
		p.Line(fmt.Sprintf("platform %s in namespace %s is at %s", res.Installation, res.Namespace, res.Version))
	}
	return err
}

// SupportBundle is 'onprem support-bundle' into dir.
func (a Actions) SupportBundle(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, support.DefaultFileName(time.Now()))
	res, _, err := (&action.SupportBundle{Collect: action.Collect{Target: a.Target, Bundles: a.Bundles, PublicKeys: a.PublicKeys, AllowUnsigned: a.AllowUnsigned}, Output: out}).Run(ctx)
	if err != nil {
		return "", err
	}
	return res.Path, nil
}

// Backups is 'onprem backup list' of the configured bucket.
func (a Actions) Backups(ctx context.Context) (*action.BackupListResult, error) {
	return (&action.ConfiguredBackups{Source: a.source(), Cluster: a.Target.Cluster}).Run(ctx)
}

// reporter passes apply's events to a Progress.
type reporter struct{ p Progress }

func (r reporter) Report(e apply.Event) { r.p.Component(e) }

// preflightLines tells p the preflight's outcome: every finding that is
// not a pass, or a count.
func preflightLines(p Progress) func(*preflight.Report) {
	return func(rep *preflight.Report) {
		n := 0
		for _, f := range rep.Findings {
			if f.Result == preflight.Pass {
				n++
				continue
			}
			p.Line(fmt.Sprintf("preflight %s: %s: %s", f.ID, f.Result, f.Message))
		}
		p.Line(fmt.Sprintf("preflight: %d of %d checks passed", n, len(rep.Findings)))
	}
}
