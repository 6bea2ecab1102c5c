package action

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/rotate"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/version"
)

// RotateList lists every Secret onprem manages in the platform's
// namespace, with its age and, for certificates, their expiry.
type RotateList struct {
	Target
	// Now is the clock of ages and expiries (time.Now when zero).
	Now time.Time
}

// RotateListResult is the listing.
type RotateListResult struct {
	Namespace string        `json:"namespace"`
	Secrets   []rotate.Item `json:"secrets"`
}

// Run reads the Secrets (names, keys and certificates; never a value).
func (r *RotateList) Run(ctx context.Context) (*RotateListResult, error) {
	ns, err := r.Target.namespace(ctx)
	if err != nil {
		return nil, err
	}
	cl, err := connect(ctx, r.Conn, r.Cluster)
	if err != nil {
		return nil, err
	}
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	items, err := rotate.List(ctx, cl.Client, ns, now)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, errNotInstalled(ns)
	}
	return &RotateListResult{Namespace: ns, Secrets: items}, nil
}

// RotateCertificates renews the platform's self-signed serving
// certificate (rotate.Renew), makes a new CA trusted beside the old one
// (rotate.NewCA), or retires the old CA (rotate.RetireCA). It takes the
// installation's lock and records the rotation in the history (a dry run
// does neither and writes nothing).
type RotateCertificates struct {
	Target
	Mode      rotate.Mode
	DryRun    bool
	LockWait  time.Duration
	LockLease time.Duration
}

// RotateCertificatesResult is the rotation and what to run next.
type RotateCertificatesResult struct {
	rotate.CertificatesResult
	// Next lists the commands that carry a new ca.crt to the runners and
	// runtimes, which hold a copy of it.
	Next []string `json:"next,omitempty"`
}

// Run rotates.
func (r *RotateCertificates) Run(ctx context.Context) (*RotateCertificatesResult, error) {
	if r.Mode == "" {
		r.Mode = rotate.Renew
	}
	ns, conf, cl, err := targetCluster(ctx, r.Target, r.Conn, r.Cluster)
	if err != nil {
		return nil, err
	}
	opts := rotate.CertificatesOptions{Client: cl.Client, Namespace: ns, Mode: r.Mode, DryRun: r.DryRun}
	if r.DryRun {
		_, _, st, err := conf.LoadInstalled(ctx, ns)
		if err != nil {
			return nil, err
		}
		res, err := rotate.Certificates(ctx, opts)
		if err != nil {
			return nil, rotateErr(err)
		}
		return &RotateCertificatesResult{CertificatesResult: *res, Next: caNext(st, res)}, nil
	}

	ctx, h, err := conf.lockInstalled(ctx, ns, "rotate certificates", r.LockWait, r.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	// A refusal is known before anything is recorded: the history holds
	// rotations that were attempted.
	probe := opts
	probe.DryRun = true
	if _, err := rotate.Certificates(ctx, probe); err != nil {
		return nil, rotateErr(err)
	}
	if err := h.store.Begin(ctx, h.st, state.Operation{Kind: state.KindRotate, Version: h.st.Version, Installer: version.Version,
		Message: "rotating certificates: " + string(r.Mode)}); err != nil {
		return nil, err
	}
	res, err := rotate.Certificates(ctx, opts)
	if err != nil {
		if ferr := h.store.Finish(context.WithoutCancel(ctx), h.st, state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return nil, rotateErr(err)
	}
	msg := "certificates (" + string(r.Mode) + "): " + res.Summary
	if err := h.store.Finish(ctx, h.st, state.OutcomeSucceeded, msg); err != nil {
		return nil, fmt.Errorf("certificates rotated, but recording it failed: %w", err)
	}
	return &RotateCertificatesResult{CertificatesResult: *res, Next: caNext(h.st, res)}, nil
}

// rotateErr makes a refusal an input error (exit code 2).
func rotateErr(err error) error {
	var re *rotate.RefusedError
	if errors.As(err, &re) {
		return inputErr(err)
	}
	return err
}

// caNext lists what follows a change of ca.crt: clients take the new
// one before the old CA is retired, and runners and runtimes, which hold
// a copy of it, are upgraded.
func caNext(st *state.State, res *rotate.CertificatesResult) []string {
	if !res.Changed || res.Mode == rotate.Renew {
		return nil
	}
	var out []string
	if res.Mode == rotate.NewCA {
		out = append(out, "give clients the new ca.crt (kubectl -n "+st.Namespace+" get secret "+res.Secret+" -o jsonpath='{.data.ca\\.crt}' | base64 -d)")
	}
	if len(st.Runners) > 0 {
		out = append(out, "onprem runner upgrade --all   (the runners' copy of ca.crt)")
	}
	if len(st.Runtimes) > 0 {
		out = append(out, "onprem runtime upgrade --all   (the runtimes' copy of ca.crt)")
	}
	if res.Mode == rotate.NewCA {
		out = append(out, "once every client has it: onprem rotate certificates --retire-ca")
	}
	return out
}

// RotateCredentials gives services' own database logins new passwords
// (rotate.CredentialsAll): each service switches to the other of its two
// logins (every engine first), its workloads roll onto them once, and the
// old logins are revoked. It takes the installation's lock and records the rotation
// (logins, never passwords) in the history; a dry run does neither and
// writes nothing. Engines run outside the cluster (external mode) are the
// operator's: refused, nothing changed.
type RotateCredentials struct {
	Target
	// Engines are the database engines (rotate.PostgreSQL,
	// rotate.MongoDB, rotate.RabbitMQ, rotate.Redis); empty: every one
	// onprem runs.
	Engines []string
	// Components limits the rotation to these services (all when empty).
	Components []string
	// Admin rotates the admins too (PostgreSQL's password, MongoDB's
	// user) of every engine onprem runs, or of Engines when named; alone
	// (no Engines, no Components), only them. With none of the four
	// fields, every login and every admin are rotated.
	Admin bool
	// Admins names the engines whose admin to rotate (each run by onprem,
	// else refused); alone, only them.
	Admins []string
	DryRun bool
	// Timeout bounds each workload's rollout (5 min when zero).
	Timeout   time.Duration
	LockWait  time.Duration
	LockLease time.Duration
	// Exec runs the database clients (default: in the engines' pods,
	// through the API server).
	Exec podexec.Executor
	// Progress, when set, is told each step.
	Progress func(string)
}

// RotateCredentialsResult is each engine's rotation.
type RotateCredentialsResult struct {
	Namespace string                     `json:"namespace"`
	DryRun    bool                       `json:"dryRun,omitempty"`
	Engines   []rotate.CredentialsResult `json:"engines"`
}

// credentialEngines are the engines whose service logins onprem rotates.
var credentialEngines = []string{rotate.PostgreSQL, rotate.MongoDB, rotate.RabbitMQ, rotate.Redis}

// adminEngines are the engines whose admin onprem rotates (PostgreSQL's
// password, MongoDB's user).
var adminEngines = []string{rotate.PostgreSQL, rotate.MongoDB}

// Run rotates.
func (r *RotateCredentials) Run(ctx context.Context) (*RotateCredentialsResult, error) {
	ns, conf, cl, err := targetCluster(ctx, r.Target, r.Conn, r.Cluster)
	if err != nil {
		return nil, err
	}
	ex := r.Exec
	// plan is, per engine, the options of its rotation, from what the
	// installation runs and which services have logins where.
	plan := func(st *state.State) ([]rotate.CredentialsOptions, error) {
		if err := requireInstalled(st, ns); err != nil {
			return nil, err
		}
		engines := r.Engines
		explicit := len(engines) > 0
		everything := !explicit && len(r.Components) == 0 && !r.Admin && len(r.Admins) == 0
		if !explicit {
			engines = credentialEngines
		}
		if (r.Admin || len(r.Admins) > 0) && !explicit && len(r.Components) == 0 {
			engines = nil // the admins alone
		}
		var out []rotate.CredentialsOptions
		covered := map[string]bool{}
		for _, e := range engines {
			if !slices.Contains(credentialEngines, e) {
				return nil, inputErr(fmt.Errorf("database engine %q: onprem rotates the services' logins on %s (their admins with --admin)", e, strings.Join(credentialEngines, ", ")))
			}
			if _, ok := st.Components[e]; !ok {
				if explicit {
					return nil, inputErr(fmt.Errorf("%s is not run by onprem in namespace %s (external mode, or not used): "+
						"onprem does not own its credentials, so it rotates none of them; rotate them where the database is managed, "+
						"then update the services' Secrets", e, ns))
				}
				continue
			}
			have, theirs, err := rotate.ServiceLogins(ctx, cl.Client, ns, e)
			if err != nil {
				return nil, err
			}
			for _, c := range r.Components {
				if slices.Contains(theirs, c) {
					return nil, inputErr(rotate.OwnLoginRefused(ns, e, c))
				}
			}
			services := have
			if len(r.Components) > 0 {
				services = nil
				for _, c := range r.Components {
					if slices.Contains(have, c) {
						services = append(services, c)
						covered[c] = true
					}
				}
			}
			if len(services) == 0 {
				continue
			}
			o := credentialOptions(cl, ex, ns, e, services, r.Timeout, r.Progress)
			o.DryRun = r.DryRun
			out = append(out, o)
		}
		admins, err := r.admins(st, ns, everything)
		if err != nil {
			return nil, err
		}
		for _, e := range admins {
			o := credentialOptions(cl, ex, ns, e, nil, r.Timeout, r.Progress)
			o.Admin, o.DryRun = true, r.DryRun
			out = append(out, o)
		}
		for _, c := range r.Components {
			if !covered[c] {
				return nil, inputErr(fmt.Errorf("component %q has no database login of its own that onprem rotates (on %s run by onprem)", c, strings.Join(engines, " or ")))
			}
		}
		if len(out) == 0 {
			return nil, inputErr(fmt.Errorf("no service has a database login of its own that onprem rotates in namespace %s (databases in external mode are yours to rotate)", ns))
		}
		return out, nil
	}
	res := &RotateCredentialsResult{Namespace: ns, DryRun: r.DryRun}
	if r.DryRun {
		st, err := state.NewStore(cl.Client, ns).Load(ctx)
		if err != nil {
			return nil, err
		}
		opts, err := plan(st)
		if err != nil {
			return nil, err
		}
		if res.Engines, err = rotate.CredentialsAll(ctx, opts); err != nil {
			return nil, rotateErr(err)
		}
		return res, nil
	}

	ctx, h, err := conf.lockAndLoad(ctx, ns, "rotate credentials", r.LockWait, r.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	opts, err := plan(h.st)
	if err != nil {
		return nil, err
	}
	probes := slices.Clone(opts)
	for i := range probes {
		probes[i].DryRun = true
	}
	if _, err := rotate.CredentialsAll(ctx, probes); err != nil {
		return nil, rotateErr(err)
	}
	var what []string
	for _, o := range opts {
		if o.Admin {
			what = append(what, o.Engine+" admin")
		} else {
			what = append(what, o.Engine+" logins of "+strings.Join(o.Services, ", "))
		}
	}
	if err := h.store.Begin(ctx, h.st, state.Operation{Kind: state.KindRotate, Version: h.st.Version, Installer: version.Version,
		Message: "rotating credentials: " + strings.Join(what, "; ")}); err != nil {
		return nil, err
	}
	// Every engine switches, the services roll once, then every engine
	// revokes: one round of restarts, not one per engine.
	engines, err := rotate.CredentialsAll(ctx, opts)
	if err != nil {
		if ferr := h.store.Finish(context.WithoutCancel(ctx), h.st, state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return nil, rotateErr(err)
	}
	res.Engines = engines
	var switched []string
	for _, er := range engines {
		for _, l := range er.Logins {
			switched = append(switched, er.Engine+" "+l.Service+" "+l.From+" → "+l.To)
		}
	}
	msg := "credentials: " + strings.Join(switched, ", ")
	if err := h.store.Finish(ctx, h.st, state.OutcomeSucceeded, msg); err != nil {
		return nil, fmt.Errorf("credentials rotated, but recording it failed: %w", err)
	}
	return res, nil
}

// admins are the engines whose admin the rotation covers: Admins; with
// Admin, every one onprem runs (or those of Engines); everything: every one
// onprem runs.
func (r *RotateCredentials) admins(st *state.State, ns string, everything bool) ([]string, error) {
	external := func(e string) error {
		return inputErr(fmt.Errorf("%s is not run by onprem in namespace %s (external mode, or not used): its admin is yours; "+
			"rotate it where the database is managed, then update the Secret", e, ns))
	}
	var out []string
	for _, e := range r.Admins {
		if !slices.Contains(adminEngines, e) {
			return nil, inputErr(fmt.Errorf("database engine %q: onprem rotates the admins of %s (RabbitMQ and Redis have one login, rotated with --database)",
				e, strings.Join(adminEngines, " and ")))
		}
		if _, runs := st.Components[e]; !runs {
			return nil, external(e)
		}
		out = append(out, e)
	}
	if !r.Admin && !everything {
		return out, nil
	}
	candidates := adminEngines
	if len(r.Engines) > 0 {
		candidates = nil
		for _, e := range adminEngines {
			if slices.Contains(r.Engines, e) {
				candidates = append(candidates, e)
			}
		}
		if len(candidates) == 0 {
			return nil, inputErr(fmt.Errorf("--admin with --database %s: onprem rotates the admins of %s (RabbitMQ and Redis have one login, rotated with the engine)",
				strings.Join(r.Engines, ", "), strings.Join(adminEngines, " and ")))
		}
	}
	n := len(out)
	for _, e := range candidates {
		if _, runs := st.Components[e]; !runs {
			if len(r.Engines) > 0 {
				return nil, external(e)
			}
			continue
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	if r.Admin && len(out) == n && n == 0 {
		return nil, inputErr(fmt.Errorf("neither %s is run by onprem in namespace %s (external mode, or not used): their admins are yours; "+
			"rotate them where the databases are managed, then update the Secrets", strings.Join(adminEngines, " nor "), ns))
	}
	return out, nil
}

// credentialOptions are the options of a rotation of engine's logins of
// services in ns, run with ex in the engine's pod (podexec.Kube when nil).
func credentialOptions(cl *kube.Cluster, ex podexec.Executor, ns, engine string, services []string, timeout time.Duration, progress func(string)) rotate.CredentialsOptions {
	if ex == nil {
		ex = podexec.Kube{Config: cl.Config, Client: cl.Client}
	}
	return rotate.CredentialsOptions{Client: cl.Client, Namespace: ns, Engine: engine, Services: services, RolloutTimeout: timeout,
		Progress: progress, Logins: rotate.PodLogins{Client: cl.Client, Namespace: ns, Exec: ex}}
}

// RotateKeys rotates the platform's signing and encryption keys with a
// key ring (rotate.Keys): the new keys verify everywhere before they
// sign, and the old ones keep verifying until Retire. It takes the
// installation's lock and records the rotation (never a key) in the
// history; a dry run does neither and writes nothing.
type RotateKeys struct {
	Target
	// Retire drops every key but the current ones.
	Retire bool
	DryRun bool
	// Timeout bounds each workload's rollout (5 min when zero).
	Timeout   time.Duration
	LockWait  time.Duration
	LockLease time.Duration
	Progress  func(string)
}

// Run rotates.
func (r *RotateKeys) Run(ctx context.Context) (*rotate.KeysResult, error) {
	ns, conf, cl, err := targetCluster(ctx, r.Target, r.Conn, r.Cluster)
	if err != nil {
		return nil, err
	}
	opts := rotate.KeysOptions{Client: cl.Client, Namespace: ns, Retire: r.Retire, DryRun: r.DryRun, RolloutTimeout: r.Timeout, Progress: r.Progress}
	if r.DryRun {
		if _, _, _, err := conf.LoadInstalled(ctx, ns); err != nil {
			return nil, err
		}
		res, err := rotate.Keys(ctx, opts)
		return res, rotateErr(err)
	}
	ctx, h, err := conf.lockInstalled(ctx, ns, "rotate keys", r.LockWait, r.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	probe := opts
	probe.DryRun = true
	if _, err := rotate.Keys(ctx, probe); err != nil {
		return nil, rotateErr(err)
	}
	what := "rotating the signing and encryption keys"
	if r.Retire {
		what = "retiring the older signing and encryption keys"
	}
	if err := h.store.Begin(ctx, h.st, state.Operation{Kind: state.KindRotate, Version: h.st.Version, Installer: version.Version, Message: what}); err != nil {
		return nil, err
	}
	res, err := rotate.Keys(ctx, opts)
	if err != nil {
		if ferr := h.store.Finish(context.WithoutCancel(ctx), h.st, state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return nil, rotateErr(err)
	}
	msg := fmt.Sprintf("keys: %s (%d key(s) in each ring)", res.Summary, res.RingAfter)
	if err := h.store.Finish(ctx, h.st, state.OutcomeSucceeded, msg); err != nil {
		return nil, fmt.Errorf("keys rotated, but recording it failed: %w", err)
	}
	return res, nil
}
