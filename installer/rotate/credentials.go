package rotate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/secrets"
)

// Keys and annotations of a service's database Secret that a credential
// rotation adds.
const (
	// KeyOwner names the role that owns the service's database once the
	// login alternates (see Credentials); absent, the login is the owner.
	KeyOwner = "owner"
	// keyNextUsername and keyNextPassword hold the login a rotation is
	// about to switch to, written before the database learns it: a run
	// killed after that finds them and goes on with the same values.
	keyNextUsername = "next-username"
	keyNextPassword = "next-password"
	// AnnotationRetire names the login a rotation switched away from and
	// has yet to revoke, once the services have restarted.
	AnnotationRetire = "onprem.dev/rotation-retire"
	// AnnotationCredentials, on a workload's pod template, is a digest of
	// the logins of the Secrets it reads: a rotation changes it, which
	// rolls the workload's pods onto the new login.
	AnnotationCredentials = "onprem.dev/credentials"
)

// secondLoginSuffix ends the name of a service's second login: the login
// alternates between the owner and owner+suffix at each rotation.
const secondLoginSuffix = "_2"

// Engines whose service logins Credentials rotates.
const (
	PostgreSQL = "postgresql"
	MongoDB    = "mongodb"
	// RabbitMQ has one login that every service shares (the Secret
	// credentials.RabbitMQ): it alternates like a service's own.
	RabbitMQ = "rabbitmq"
)

// SharedLogin is the service name a rotation gives RabbitMQ's one login,
// which every service uses.
const SharedLogin = "all services"

// Login is a service's login on its database engine.
type Login struct {
	Username string
	Password []byte
	Database string
	// Owner is the role that owns Database (PostgreSQL): Username itself
	// or a role Username acts as.
	Owner string
}

// Logins changes logins on a database engine; PodLogins does it in the
// engine's pod.
type Logins interface {
	// Grant makes l a login of its database with l's password and the
	// rights the service's provisioning gives: what the db-provision Job
	// does for the Secret's values, idempotent.
	Grant(ctx context.Context, engine string, l Login) error
	// Revoke makes l's user (of l's database) unable to log in. A login
	// that does not exist is revoked already; l.Password is not used.
	Revoke(ctx context.Context, engine string, l Login) error
}

// CredentialsOptions say whose database logins to rotate.
type CredentialsOptions struct {
	Client    kubernetes.Interface
	Namespace string
	Logins    Logins
	// Engine is the database engine of the logins (PostgreSQL).
	Engine string
	// Services limits the rotation to these services; empty: every
	// service with a login of its own on Engine.
	Services []string
	// Admin rotates the engine's admin password instead (PostgreSQL).
	Admin bool
	// DryRun says what would change and writes nothing.
	DryRun bool
	// Now stamps the rotation (time.Now when zero).
	Now time.Time
	// RolloutTimeout bounds the wait for the restarted workloads (5 min
	// when zero).
	RolloutTimeout time.Duration
	// Progress, when set, is told each step.
	Progress func(string)
	// Password makes a new password (32 random characters when nil).
	Password func() ([]byte, error)
}

// CredentialsResult is what a credential rotation did (or, in a dry run,
// would do). It names logins and Secrets, never a password.
type CredentialsResult struct {
	Engine string        `json:"engine"`
	DryRun bool          `json:"dryRun,omitempty"`
	Logins []LoginChange `json:"logins"`
	// Restarted lists the workloads rolled onto the new logins
	// ("Deployment/name").
	Restarted []string `json:"restarted,omitempty"`
}

// LoginChange is one service's login switched.
type LoginChange struct {
	Service string `json:"service"`
	Secret  string `json:"secret"`
	// From is the login revoked, To the one the service uses now.
	From string `json:"from"`
	To   string `json:"to"`
	// Resumed is the step a killed run had reached, which this run
	// finished: "granting" (the new login was written to the Secret) or
	// "revoking" (the services were switched to it).
	Resumed string `json:"resumed,omitempty"`
}

// serviceLogin is one service's Secret as a rotation sees it.
type serviceLogin struct {
	service string
	secret  *corev1.Secret
}

func (s serviceLogin) owner() string {
	if o := string(s.secret.Data[KeyOwner]); o != "" {
		return o
	}
	return string(s.secret.Data["username"])
}

// next is the login the rotation switches to: the other of the owner and
// the second login.
func (s serviceLogin) next() string {
	if u := string(s.secret.Data[keyNextUsername]); u != "" {
		return u
	}
	if string(s.secret.Data["username"]) == s.owner() {
		return s.owner() + secondLoginSuffix
	}
	return s.owner()
}

// Credentials gives services' own database logins new passwords, in an
// order that keeps every service connected:
//
//  1. for each service, the other of its two logins (the owner and a
//     second role acting as the owner) and a new password are written to
//     its Secret beside the current ones, then set in the database;
//  2. the Secret switches to the new login (one write), recording the old
//     one to revoke;
//  3. every workload reading those Secrets is rolled onto them (a pod
//     template annotation), and the rollouts are awaited: old pods keep
//     working with the old login meanwhile;
//  4. the old logins are revoked (refused from then on), and the Secrets
//     forget them.
//
// A run killed at any point is finished by the next one, which finds the
// step in the Secret. Values never leave this function: errors and the
// result name Secrets and logins. CredentialsAll rotates several engines
// with one round of restarts.
func Credentials(ctx context.Context, o CredentialsOptions) (*CredentialsResult, error) {
	res, err := CredentialsAll(ctx, []CredentialsOptions{o})
	if len(res) == 0 {
		return nil, err
	}
	return &res[0], err
}

// serviceLoginsRotation is the rotation of services' own logins on an
// engine (PostgreSQL, MongoDB) or of RabbitMQ's shared login, cut where
// the services roll (see Credentials).
func serviceLoginsRotation(ctx context.Context, o CredentialsOptions, newPassword func() ([]byte, error), now time.Time,
	say func(string, ...any)) (*staged, error) {
	logins, err := serviceLogins(ctx, o.Client, o.Namespace, o.Engine, o.Services)
	if err != nil {
		return nil, err
	}
	res := &CredentialsResult{Engine: o.Engine, DryRun: o.DryRun}
	for _, l := range logins {
		ch := LoginChange{Service: l.service, Secret: l.secret.Name, From: string(l.secret.Data["username"]), To: l.next()}
		switch {
		case l.secret.Annotations[AnnotationRetire] != "":
			ch.Resumed, ch.From, ch.To = "revoking", l.secret.Annotations[AnnotationRetire], string(l.secret.Data["username"])
		case len(l.secret.Data[keyNextUsername]) > 0:
			ch.Resumed = "granting"
		}
		res.Logins = append(res.Logins, ch)
	}
	api := o.Client.CoreV1().Secrets(o.Namespace)
	st := &staged{res: res, secrets: secretNames(logins), what: o.Engine + " logins"}
	st.switchOver = func(ctx context.Context) error {
		for i := range logins {
			l := &logins[i]
			if l.secret.Annotations[AnnotationRetire] != "" {
				continue // switched already; the services restart next
			}
			ref := o.Namespace + "/" + l.secret.Name
			if len(l.secret.Data[keyNextUsername]) == 0 {
				pw, err := newPassword()
				if err != nil {
					return fmt.Errorf("a new password for %s: %w", ref, err)
				}
				s := l.secret.DeepCopy()
				s.Data[KeyOwner] = []byte(l.owner())
				s.Data[keyNextUsername] = []byte(l.next())
				s.Data[keyNextPassword] = pw
				// Login names are no secret: a support bundle's redaction
				// leaves them alone, as it does the username.
				if s.Annotations == nil {
					s.Annotations = map[string]string{}
				}
				s.Annotations[secrets.AnnotationPublicKeys] = addKeys(s.Annotations[secrets.AnnotationPublicKeys], KeyOwner, keyNextUsername)
				if l.secret, err = api.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
					return fmt.Errorf("writing the next login of %s: %w", ref, err)
				}
			}
			next := Login{Username: string(l.secret.Data[keyNextUsername]), Password: l.secret.Data[keyNextPassword],
				Database: string(l.secret.Data["database"]), Owner: l.owner()}
			say("%s: granting login %s on %s", l.service, next.Username, o.Engine)
			if err := o.Logins.Grant(ctx, o.Engine, next); err != nil {
				return fmt.Errorf("granting the new login of %s (the service still uses its old one; run the rotation again): %w",
					l.service, redactErr(err, next.Password))
			}
			s := l.secret.DeepCopy()
			old := string(s.Data["username"])
			s.Data["username"], s.Data["password"] = s.Data[keyNextUsername], s.Data[keyNextPassword]
			delete(s.Data, keyNextUsername)
			delete(s.Data, keyNextPassword)
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[AnnotationRetire] = old
			s.Annotations[AnnotationRotatedAt] = now.UTC().Format(time.RFC3339)
			var err error
			if l.secret, err = api.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("switching %s to its new login: %w", ref, err)
			}
			say("%s: Secret %s now holds login %s", l.service, l.secret.Name, next.Username)
		}
		return nil
	}
	st.revoke = func(ctx context.Context) error {
		for i := range logins {
			l := &logins[i]
			old := l.secret.Annotations[AnnotationRetire]
			if old != "" && old != string(l.secret.Data["username"]) {
				say("%s: revoking login %s", l.service, old)
				if err := o.Logins.Revoke(ctx, o.Engine, Login{Username: old, Database: string(l.secret.Data["database"]), Owner: l.owner()}); err != nil {
					return fmt.Errorf("revoking the old login %s of %s (the service uses its new one; run the rotation again): %w", old, l.service, err)
				}
			}
			s := l.secret.DeepCopy()
			delete(s.Annotations, AnnotationRetire)
			var err error
			if l.secret, err = api.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("recording the revocation in %s/%s: %w", o.Namespace, l.secret.Name, err)
			}
		}
		return nil
	}
	return st, nil
}

// Due lists the services of engine whose own login is older than maxAge
// (since its last rotation, else its creation), and those a rotation was
// interrupted in: what spec.rotation.credentialsMaxAgeDays rotates.
func Due(ctx context.Context, c kubernetes.Interface, ns, engine string, maxAge time.Duration, now time.Time) ([]string, error) {
	all, _, err := readLogins(ctx, c, ns, engine)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range all {
		since := l.secret.CreationTimestamp.Time
		if t, err := time.Parse(time.RFC3339, l.secret.Annotations[AnnotationRotatedAt]); err == nil {
			since = t
		}
		pending := len(l.secret.Data[keyNextUsername]) > 0 || l.secret.Annotations[AnnotationRetire] != ""
		if pending || now.Sub(since) > maxAge {
			out = append(out, l.service)
		}
	}
	return out, nil
}

// generatePassword makes a password as onprem generates them.
func generatePassword() ([]byte, error) {
	data, err := secrets.Generate(credentials.Secret{Name: "rotation", Keys: []credentials.Key{{Name: "p", Kind: credentials.Password}}}, secrets.GenerateOptions{})
	return data["p"], err
}

// ServiceLogins lists the services with a login of their own on engine in
// namespace that onprem rotates, and those whose login Secret is the
// operator's own (which onprem never changes).
func ServiceLogins(ctx context.Context, c kubernetes.Interface, ns, engine string) (onprem, operator []string, err error) {
	all, operators, err := readLogins(ctx, c, ns, engine)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range all {
		onprem = append(onprem, l.service)
	}
	for svc := range operators {
		operator = append(operator, svc)
	}
	slices.Sort(operator)
	return onprem, operator, nil
}

// OwnLoginRefused is the refusal to rotate a service's login held in a
// Secret that is the operator's own.
func OwnLoginRefused(ns, engine, service string) error {
	name := credentials.ServiceSecret(service, engine)
	switch engine {
	case RabbitMQ:
		name = credentials.RabbitMQ
	case Redis:
		name = credentials.Redis
	}
	return refused("secret %s/%s holds %s's %s login but is your own (it lacks the label %s=true), so onprem never changes it: "+
		"rotate that login where it comes from, then update the Secret and restart the service",
		ns, name, service, engine, secrets.LabelGenerated)
}

// serviceOf is the service whose engine login Secret name is.
func serviceOf(name, engine string) (string, bool) {
	svc, ok := strings.CutSuffix(strings.TrimPrefix(name, "onprem-"), "-"+engine)
	return svc, ok && svc != "" && name == credentials.ServiceSecret(svc, engine)
}

// readLogins reads, sorted by service, the services' login Secrets of
// engine that onprem generated (with a username, password and database),
// and the services whose login Secret is the operator's own.
func readLogins(ctx context.Context, c kubernetes.Interface, ns, engine string) ([]serviceLogin, map[string]bool, error) {
	l, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the Secrets of %s: %w", ns, err)
	}
	var all []serviceLogin
	operators := map[string]bool{}
	for i := range l.Items {
		s := &l.Items[i]
		svc, ok := serviceOf(s.Name, engine)
		switch engine {
		case RabbitMQ:
			svc, ok = SharedLogin, s.Name == credentials.RabbitMQ
		case Redis:
			svc, ok = SharedLogin, s.Name == credentials.Redis
		}
		switch {
		case !ok:
		case s.Labels[secrets.LabelGenerated] != "true":
			operators[svc] = true
		case engine == Redis && len(s.Data["password"]) > 0,
			len(s.Data["username"]) > 0 && len(s.Data["password"]) > 0 && (len(s.Data["database"]) > 0 || engine == RabbitMQ):
			all = append(all, serviceLogin{service: svc, secret: s})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].service < all[j].service })
	return all, operators, nil
}

// serviceLogins reads the services' login Secrets of engine that onprem
// generated, limited to services when given; naming a service without
// one, or with the operator's own, is refused.
func serviceLogins(ctx context.Context, c kubernetes.Interface, ns, engine string, services []string) ([]serviceLogin, error) {
	all, operators, err := readLogins(ctx, c, ns, engine)
	if err != nil {
		return nil, err
	}
	for _, want := range services {
		if operators[want] {
			return nil, OwnLoginRefused(ns, engine, want)
		}
	}
	if len(all) == 0 {
		return nil, refused("no service has a %s login of its own in namespace %s (is the platform installed there, with %s run by onprem?)", engine, ns, engine)
	}
	if len(services) == 0 {
		return all, nil
	}
	var out []serviceLogin
	var names []string
	for _, s := range all {
		names = append(names, s.service)
	}
	for _, want := range services {
		i := slices.IndexFunc(all, func(s serviceLogin) bool { return s.service == want })
		if i < 0 {
			return nil, refused("component %q has no %s login of its own; these do: %s", want, engine, strings.Join(names, ", "))
		}
		if !slices.ContainsFunc(out, func(s serviceLogin) bool { return s.service == want }) {
			out = append(out, all[i])
		}
	}
	return out, nil
}

func secretNames(logins []serviceLogin) []string {
	var out []string
	for _, l := range logins {
		out = append(out, l.secret.Name)
	}
	return out
}

// addKeys adds keys to a comma-separated list of key names.
func addKeys(list string, keys ...string) string {
	var out []string
	for _, k := range strings.Split(list, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	out = append(out, keys...)
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

// redactErr replaces a password in an error's text.
func redactErr(err error, password []byte) error {
	if err == nil || len(password) == 0 || !strings.Contains(err.Error(), string(password)) {
		return err
	}
	return errors.New(secrets.Redact(err.Error(), password))
}

// secretsDigest is the digest of what the Secrets among names hold that
// a rotation changes: the login (username) of a login Secret, a hash of
// the values of any other. The same values give the same digest, so a
// resumed rotation does not roll a workload twice; the digest reveals
// nothing of a value (a truncated SHA-256 of 32 random characters or
// bytes and more).
func secretsDigest(ctx context.Context, c kubernetes.Interface, ns string, names []string) (string, error) {
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		s, err := c.CoreV1().Secrets(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("reading secret %s/%s: %w", ns, n, err)
		}
		fmt.Fprintf(h, "%s=%s\n", n, s.Data["username"])
		if len(s.Data["username"]) > 0 {
			continue
		}
		keys := make([]string, 0, len(s.Data))
		for k := range s.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := sha256.Sum256(s.Data[k])
			fmt.Fprintf(h, "%s:%x\n", k, v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
