package rotate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// staged is one engine's credential rotation cut where the services
// roll: switchOver leaves the Secrets holding the new credentials, which
// the database accepts beside the old ones; the workloads reading
// secrets then roll onto them; revoke makes the database refuse the old
// ones. A rotation with no services to roll (the admin's) does all its
// work in switchOver.
type staged struct {
	res *CredentialsResult
	// secrets are the Secrets whose readers roll (none: no restart).
	secrets []string
	// what names the credentials in messages ("postgresql logins").
	what       string
	switchOver func(context.Context) error
	revoke     func(context.Context) error
}

// CredentialsAll rotates the credentials of several engines (see
// Credentials) with one round of restarts: every engine switches its
// Secrets to new credentials that its database accepts beside the old
// ones; every workload reading any of those Secrets rolls once; then every
// engine revokes the old ones. Rotating four engines one after the other
// would restart each service four times.
//
// The options share Client and Namespace; the restart uses the longest
// RolloutTimeout and the first Progress. A run killed or failed at any
// point is finished by the next one, as with Credentials. The results
// are in the order of opts, up to the engine that failed.
func CredentialsAll(ctx context.Context, opts []CredentialsOptions) ([]CredentialsResult, error) {
	if len(opts) == 0 {
		return nil, nil
	}
	first := opts[0]
	var timeout = orFiveMinutes(first.RolloutTimeout)
	for _, o := range opts[1:] {
		if o.Client != first.Client || o.Namespace != first.Namespace {
			return nil, errors.New("rotating credentials: the engines' options name different clusters or namespaces")
		}
		timeout = max(timeout, orFiveMinutes(o.RolloutTimeout))
	}
	say := progressOf(first.Progress)

	plans := make([]*staged, 0, len(opts))
	for _, o := range opts {
		p, err := plan(ctx, o)
		if err != nil {
			return results(plans), err
		}
		plans = append(plans, p)
	}
	// The engines' own pods read their Secrets too (RabbitMQ's first
	// user, Redis's --requirepass): they are not restarted, which would
	// interrupt every service.
	var names, skip []string
	for i, o := range opts {
		skip = append(skip, "StatefulSet/"+o.Engine)
		names = append(names, plans[i].secrets...)
	}
	for _, p := range plans {
		if len(p.secrets) == 0 {
			continue
		}
		var err error
		if p.res.Restarted, err = consumers(ctx, first.Client, first.Namespace, p.secrets, skip); err != nil {
			return results(plans), err
		}
	}
	if first.DryRun {
		return results(plans), nil
	}

	for i, p := range plans {
		if err := p.switchOver(ctx); err != nil {
			if i > 0 {
				err = fmt.Errorf("%w (%s switched already; the next run finishes them)", err, whats(plans[:i]))
			}
			return results(plans), err
		}
	}
	if len(names) > 0 {
		slices.Sort(names)
		names = slices.Compact(names)
		if _, err := restartFor(ctx, first.Client, first.Namespace, names, skip, timeout, "every pod uses the new credentials", say); err != nil {
			return results(plans), fmt.Errorf("restarting the services onto their new credentials (%s; the old ones still work; run the rotation again): %w",
				whats(plans), err)
		}
	}
	for _, p := range plans {
		if p.revoke == nil {
			continue
		}
		if err := p.revoke(ctx); err != nil {
			return results(plans), err
		}
	}
	return results(plans), nil
}

// plan checks one engine's options and reads its Secrets: its rotation,
// not started.
func plan(ctx context.Context, o CredentialsOptions) (*staged, error) {
	switch o.Engine {
	case PostgreSQL, MongoDB, RabbitMQ, Redis:
	default:
		return nil, refused("database engine %q: onprem rotates services' logins on %s, %s, %s and %s", o.Engine, PostgreSQL, MongoDB, RabbitMQ, Redis)
	}
	if o.Logins == nil {
		return nil, errors.New("rotating credentials: no way to reach the database (Logins)")
	}
	now, timeout, say := orNow(o.Now), orFiveMinutes(o.RolloutTimeout), progressOf(o.Progress)
	newPassword := o.Password
	if newPassword == nil {
		newPassword = generatePassword
	}
	switch {
	case o.Admin:
		return adminRotation(ctx, o, newPassword, now, timeout, say)
	case o.Engine == Redis:
		return redisRotation(ctx, o, newPassword, now, timeout, say)
	}
	return serviceLoginsRotation(ctx, o, newPassword, now, say)
}

// results are the plans' results.
func results(plans []*staged) []CredentialsResult {
	out := make([]CredentialsResult, 0, len(plans))
	for _, p := range plans {
		out = append(out, *p.res)
	}
	return out
}

// whats names the credentials of plans ("postgresql logins, redis password").
func whats(plans []*staged) string {
	var out []string
	for _, p := range plans {
		out = append(out, p.what)
	}
	return strings.Join(out, ", ")
}
