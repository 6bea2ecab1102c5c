package action

import (
	"context"
	"errors"
	"fmt"
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
	cl, err := kube.Connect(ctx, r.Cluster)
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
		return nil, inputErr(&NotInstalledError{Namespace: ns})
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
	ns, err := r.Target.namespace(ctx)
	if err != nil {
		return nil, err
	}
	cl, err := kube.Connect(ctx, r.Cluster)
	if err != nil {
		return nil, err
	}
	opts := rotate.CertificatesOptions{Client: cl.Client, Namespace: ns, Mode: r.Mode, DryRun: r.DryRun}
	if r.DryRun {
		st, err := state.NewStore(cl.Client, ns).Load(ctx)
		if err != nil {
			return nil, err
		}
		if st.Version == "" {
			return nil, inputErr(&NotInstalledError{Namespace: ns})
		}
		res, err := rotate.Certificates(ctx, opts)
		if err != nil {
			return nil, rotateErr(err)
		}
		return &RotateCertificatesResult{CertificatesResult: *res, Next: caNext(st, res)}, nil
	}

	ctx, h, err := lockAndLoad(ctx, cl, ns, "rotate certificates", r.LockWait, r.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	if h.st.Version == "" {
		return nil, inputErr(&NotInstalledError{Namespace: ns})
	}
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
// (rotate.Credentials): each service switches to the other of its two
// logins, its workloads roll onto it, and the old login is revoked. It
// takes the installation's lock and records the rotation (logins, never
// passwords) in the history; a dry run does neither and writes nothing.
// Engines run outside the cluster (external mode) are the operator's:
// refused, nothing changed.
type RotateCredentials struct {
	Target
	// Engine is the database engine (rotate.PostgreSQL).
	Engine string
	// Components limits the rotation to these services (all when empty).
	Components []string
	DryRun     bool
	// Timeout bounds each workload's rollout (5 min when zero).
	Timeout   time.Duration
	LockWait  time.Duration
	LockLease time.Duration
	// Exec runs the database client (default: in the engine's pod,
	// through the API server).
	Exec podexec.Executor
	// Progress, when set, is told each step.
	Progress func(string)
}

// Run rotates.
func (r *RotateCredentials) Run(ctx context.Context) (*rotate.CredentialsResult, error) {
	ns, err := r.Target.namespace(ctx)
	if err != nil {
		return nil, err
	}
	cl, err := kube.Connect(ctx, r.Cluster)
	if err != nil {
		return nil, err
	}
	ex := r.Exec
	if ex == nil {
		ex = podexec.Kube{Config: cl.Config, Client: cl.Client}
	}
	opts := rotate.CredentialsOptions{Client: cl.Client, Namespace: ns, Engine: r.Engine, Services: r.Components, DryRun: r.DryRun,
		RolloutTimeout: r.Timeout, Progress: r.Progress, Logins: rotate.PodLogins{Client: cl.Client, Namespace: ns, Exec: ex}}
	check := func(st *state.State) error {
		if st.Version == "" {
			return inputErr(&NotInstalledError{Namespace: ns})
		}
		if _, ok := st.Components[r.Engine]; !ok && (r.Engine == rotate.PostgreSQL || r.Engine == rotate.MongoDB) {
			return inputErr(fmt.Errorf("%s is not run by onprem in namespace %s (external mode, or not used): "+
				"onprem does not own its credentials, so it rotates none of them; rotate them where the database is managed, "+
				"then update the services' Secrets", r.Engine, ns))
		}
		return nil
	}
	if r.DryRun {
		st, err := state.NewStore(cl.Client, ns).Load(ctx)
		if err != nil {
			return nil, err
		}
		if err := check(st); err != nil {
			return nil, err
		}
		res, err := rotate.Credentials(ctx, opts)
		return res, rotateErr(err)
	}

	ctx, h, err := lockAndLoad(ctx, cl, ns, "rotate credentials", r.LockWait, r.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	if err := check(h.st); err != nil {
		return nil, err
	}
	probe := opts
	probe.DryRun = true
	plan, err := rotate.Credentials(ctx, probe)
	if err != nil {
		return nil, rotateErr(err)
	}
	if err := h.store.Begin(ctx, h.st, state.Operation{Kind: state.KindRotate, Version: h.st.Version, Installer: version.Version,
		Message: "rotating credentials: " + r.Engine + " logins of " + loginServices(plan)}); err != nil {
		return nil, err
	}
	res, err := rotate.Credentials(ctx, opts)
	if err != nil {
		if ferr := h.store.Finish(context.WithoutCancel(ctx), h.st, state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return nil, rotateErr(err)
	}
	var switched []string
	for _, l := range res.Logins {
		switched = append(switched, l.Service+" "+l.From+" → "+l.To)
	}
	msg := "credentials (" + r.Engine + "): " + strings.Join(switched, ", ")
	if err := h.store.Finish(ctx, h.st, state.OutcomeSucceeded, msg); err != nil {
		return nil, fmt.Errorf("credentials rotated, but recording it failed: %w", err)
	}
	return res, nil
}

func loginServices(res *rotate.CredentialsResult) string {
	var out []string
	for _, l := range res.Logins {
		out = append(out, l.Service)
	}
	return strings.Join(out, ", ")
}
