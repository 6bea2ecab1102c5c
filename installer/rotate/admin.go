package rotate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/secrets"
)

// AdminLogin is the service name a rotation gives a database's admin.
const AdminLogin = "admin"

// AdminPasswords changes the admin's password of a database in its pod;
// PodLogins does it for PostgreSQL.
type AdminPasswords interface {
	// AdminFileHolds says whether the admin Secret mounted in the
	// database's pod holds password under key yet.
	AdminFileHolds(ctx context.Context, engine, key string, password []byte) (bool, error)
	// SetAdminPassword sets the admin's password to next, authenticating
	// with current or, when a run was killed after setting it, next.
	SetAdminPassword(ctx context.Context, engine string, current, next []byte) error
}

// adminRotation rotates the password of a database's admin (PostgreSQL's
// superuser, Secret credentials.PostgreSQLAdmin). Nothing holds an admin
// connection open: the admin is used by onprem's scripts in the
// database's pod and by Jobs (db-provision), which read the Secret when
// they start. The order keeps each of them working:
//
//  1. the next password is written to the Secret (next-password), and
//     onprem waits until the Secret mounted in the database's pod holds it:
//     from then on the pod's scripts try the current password, then the
//     next (dbdump.PostgreSQLAuth);
//  2. the password is changed in the database (ALTER ROLE), the old one
//     refused from then on;
//  3. the Secret switches to the new password.
//
// A run killed between 2 and 3 is finished by the next one, which
// authenticates with the next password.
func adminRotation(ctx context.Context, o CredentialsOptions, newPassword func() ([]byte, error), now time.Time, timeout time.Duration,
	say func(string, ...any)) (*staged, error) {
	switch o.Engine {
	case MongoDB:
		return mongoAdminRotation(ctx, o, newPassword, now, timeout, say)
	case PostgreSQL:
	default:
		return nil, refused("onprem rotates the admins of %s and %s only, not %s's: change it by hand (docs/rotation.md)", PostgreSQL, MongoDB, o.Engine)
	}
	ap, ok := o.Logins.(AdminPasswords)
	if !ok {
		return nil, errors.New("rotating the admin's password: no way to reach the database (AdminPasswords)")
	}
	name := credentials.PostgreSQLAdmin
	api := o.Client.CoreV1().Secrets(o.Namespace)
	ref := o.Namespace + "/" + name
	s, err := adminSecret(ctx, o, name)
	if err != nil {
		return nil, err
	}
	user := string(s.Data["username"])
	ch := LoginChange{Service: AdminLogin, Secret: name, From: user + " (current password)", To: user + " (new password)"}
	if len(s.Data[keyNextPassword]) > 0 {
		ch.Resumed = "granting"
	}
	// The pod's scripts must read the Secret's next password while the
	// server changes: without the mounted Secret, refused here, before any
	// engine of the rotation changes anything.
	if _, err := ap.AdminFileHolds(ctx, o.Engine, "password", s.Data["password"]); errors.Is(err, ErrNoAdminFile) {
		return nil, &RefusedError{Reason: o.Engine + ": " + err.Error()}
	}
	st := &staged{res: &CredentialsResult{Engine: o.Engine, DryRun: o.DryRun, Logins: []LoginChange{ch}}, what: o.Engine + " admin password"}
	st.switchOver = func(ctx context.Context) error {
		w := &secretSteps{api: api, ref: ref, s: s}
		current, next, err := w.nextPassword(ctx, newPassword)
		if err != nil {
			return err
		}
		say("%s: waiting for the kubelet to give the database's pod the admin's next password", o.Engine)
		refreshMounts(ctx, o.Client, o.Namespace, o.Engine, time.Now())
		werr := waitMounted(ctx, timeout, ErrNoAdminFile, next, func(ctx context.Context) (bool, error) {
			return ap.AdminFileHolds(ctx, o.Engine, keyNextPassword, next)
		})
		if werr != nil {
			return fmt.Errorf("the %s pod does not see the admin's next password yet, so the password is unchanged (run the rotation again): %w",
				o.Engine, werr)
		}
		say("%s: setting the admin's new password", o.Engine)
		if err := ap.SetAdminPassword(ctx, o.Engine, current, next); err != nil {
			return fmt.Errorf("setting the %s admin's new password (run the rotation again): %w", o.Engine,
				redactErr(redactErr(err, next), current))
		}
		err = w.write(ctx, "switching to the new password", func(n *corev1.Secret) {
			n.Data["password"] = next
			delete(n.Data, keyNextPassword)
			n.Annotations[AnnotationRotatedAt] = now.UTC().Format(time.RFC3339)
		})
		if err != nil {
			return fmt.Errorf("the %s admin's password is changed, but %w (run the rotation again)", o.Engine, err)
		}
		say("%s: Secret %s now holds the admin's new password; the old one is refused", o.Engine, name)
		return nil
	}
	return st, nil
}

// adminSecret reads the admin Secret name of o.Engine: a refusal when it
// is missing or the operator's own, an error when it cannot be read or is
// incomplete.
func adminSecret(ctx context.Context, o CredentialsOptions, name string) (*corev1.Secret, error) {
	ref := o.Namespace + "/" + name
	s, err := o.Client.CoreV1().Secrets(o.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, refused("secret %s does not exist (is the platform installed in namespace %s, with %s run by onprem?)", ref, o.Namespace, o.Engine)
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", ref, err)
	}
	if s.Labels[secrets.LabelGenerated] != "true" {
		return nil, refused("secret %s holds the %s admin but is your own (it lacks the label %s=true), so onprem never changes it",
			ref, o.Engine, secrets.LabelGenerated)
	}
	if len(s.Data["password"]) == 0 || len(s.Data["username"]) == 0 {
		return nil, fmt.Errorf("secret %s has no username or password: run 'onprem install' to complete it", ref)
	}
	return s, nil
}

// ErrNoAdminFile: the database's pod does not mount its admin Secret.
var ErrNoAdminFile = errors.New("the database's pod does not mount its admin Secret (/etc/postgresql-admin, /etc/mongodb-admin): its chart predates " +
	"admin rotation; run 'onprem install' (or the upgrade) first, which restarts the database once with it, then rotate again; " +
	"until then onprem changes nothing there")

// adminFileHolds exits 0 when the key ($1) of the admin Secret mounted
// in the database's pod (the folder admin names, a shell word) holds the
// value read on standard input, 3 when it does not yet, 4 when the Secret
// is not mounted.
func adminFileHolds(admin string) []string {
	return []string{"sh", "-c", `IFS= read -r want
admin=` + admin + `
[ -r "$admin/password" ] || exit 4
[ -r "$admin/$1" ] && [ "$(cat "$admin/$1")" = "$want" ] || exit 3
`}
}

// adminDirs are the folders where the charts mount the admins' Secrets
// (variables point the scripts elsewhere in tests).
var adminDirs = map[string]string{
	PostgreSQL: `"${ONPREM_PG_ADMIN_DIR:-/etc/postgresql-admin}"`,
	MongoDB:    `"${ONPREM_MONGO_ADMIN_DIR:-/etc/mongodb-admin}"`,
}

// pgSetAdmin reads two candidate passwords (the current, the next), a
// line each, logs in as the admin with the first the server accepts, and
// runs the rest of its standard input with psql: the password change.
var pgSetAdmin = []string{"sh", "-c", `set -eu
IFS= read -r current; IFS= read -r next
host="${ONPREM_DB_HOST:-127.0.0.1}"; port="${ONPREM_DB_PORT:-5432}"
for p in "$current" "$next"; do
  if PGPASSWORD="$p" PGCONNECT_TIMEOUT=5 psql --host="$host" --port="$port" --username="$POSTGRES_USER" --no-password \
      --dbname=postgres --no-psqlrc --tuples-only --command='SELECT 1' >/dev/null 2>&1; then
    PGPASSWORD="$p" exec psql --host="$host" --port="$port" --username="$POSTGRES_USER" --no-password \
      --dbname=postgres --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --file=-
  fi
done
echo "PostgreSQL accepts neither the admin's current password nor its next one" >&2
exit 1
`}

// AdminFileHolds implements AdminPasswords.
func (p PodLogins) AdminFileHolds(ctx context.Context, engine, key string, password []byte) (bool, error) {
	dir, ok := adminDirs[engine]
	if !ok {
		return false, fmt.Errorf("onprem does not change %s's admin", engine)
	}
	err := p.run(ctx, engine, slices.Concat(adminFileHolds(dir), []string{"sh", key}), strings.NewReader(string(password)+"\n"), password)
	return fileHolds(err, ErrNoAdminFile)
}

// fileHolds reads the answer of a script that checks a password file: exit
// 0 it holds the password, 3 it holds another, 4 there is no file
// (noFile); any other failure is returned.
func fileHolds(err, noFile error) (bool, error) {
	var ee *podexec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.Code == 3:
		return false, nil
	case errors.As(err, &ee) && ee.Code == 4:
		return false, noFile
	}
	return false, err
}

// SetAdminPassword implements AdminPasswords: ALTER ROLE of the admin
// itself, with statement logging off so that the server's log never holds
// the password.
func (p PodLogins) SetAdminPassword(ctx context.Context, engine string, current, next []byte) error {
	if engine != PostgreSQL {
		return fmt.Errorf("onprem does not change %s's admin", engine)
	}
	if err := oneLine(string(current), string(next)); err != nil {
		return err
	}
	q, err := psqlQuote(string(next))
	if err != nil {
		return fmt.Errorf("the new password: %w", err)
	}
	in := string(current) + "\n" + string(next) + "\n" +
		"SET log_statement = 'none';\n\\set pw " + q + "\nALTER ROLE CURRENT_USER WITH PASSWORD :'pw';\n"
	return p.run(ctx, engine, pgSetAdmin, strings.NewReader(in), next)
}

// adminSecrets are the Secrets of the admins onprem rotates.
var adminSecrets = map[string]string{PostgreSQL: credentials.PostgreSQLAdmin, MongoDB: credentials.MongoDBAdmin}

// AdminDue says whether engine's admin (PostgreSQL, MongoDB), generated by
// onprem, is older than maxAge (since its last rotation, else its
// creation), or a rotation of it was interrupted: what
// spec.rotation.credentialsMaxAgeDays rotates.
func AdminDue(ctx context.Context, c kubernetes.Interface, ns, engine string, maxAge time.Duration, now time.Time) (bool, error) {
	name, ok := adminSecrets[engine]
	if !ok {
		return false, fmt.Errorf("onprem does not rotate %s's admin", engine)
	}
	s, err := c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading secret %s/%s: %w", ns, name, err)
	}
	if s.Labels[secrets.LabelGenerated] != "true" {
		return false, nil
	}
	if len(s.Data[keyNextPassword]) > 0 || s.Annotations[AnnotationRetire] != "" {
		return true, nil
	}
	since := s.CreationTimestamp.Time
	if t, err := time.Parse(time.RFC3339, s.Annotations[AnnotationRotatedAt]); err == nil {
		since = t
	}
	return now.Sub(since) > maxAge, nil
}

// AdminLogins alternates a database's admin between two users, for an
// engine whose users hold one password each and whose scripts read the
// admin from a mounted Secret (MongoDB); PodLogins does it.
type AdminLogins interface {
	// GrantAdmin makes l a user with every right (MongoDB's root role) and
	// l's password: created, or its password and role set again.
	GrantAdmin(ctx context.Context, engine string, l Login) error
	// RevokeAdmin drops the admin user username; one that does not exist
	// is revoked already.
	RevokeAdmin(ctx context.Context, engine, username string) error
	// AdminFileHolds says whether the admin Secret mounted in the
	// database's pod holds password under key yet.
	AdminFileHolds(ctx context.Context, engine, key string, password []byte) (bool, error)
}

// mongoAdminRotation rotates MongoDB's admin (the root user, Secret
// credentials.MongoDBAdmin) the way services' logins are: the admin
// alternates between two users (root and root_2), so both log in during
// the switch:
//
//  1. the other user and a new password are written to the Secret beside
//     the current ones, then created in the database with the root role,
//     by the current admin;
//  2. the Secret switches to the new user, recording the old one;
//  3. once the Secret mounted in MongoDB's pod (which onprem's scripts
//     there read, dbdump.MongoDBAuth) holds the new user, the old user is
//     dropped by the new one, and refused from then on.
//
// Nothing holds an admin connection open: the admin is used by onprem's
// scripts in the pod and by db-provision Jobs, which read the Secret when
// they start. MongoDB's own environment (MONGO_INITDB_ROOT_*) only
// creates the first user of an empty database. A run killed at any point
// is finished by the next one, which finds the step in the Secret.
func mongoAdminRotation(ctx context.Context, o CredentialsOptions, newPassword func() ([]byte, error), now time.Time, timeout time.Duration,
	say func(string, ...any)) (*staged, error) {
	al, ok := o.Logins.(AdminLogins)
	if !ok {
		return nil, errors.New("rotating MongoDB's admin: no way to reach the database (AdminLogins)")
	}
	name := credentials.MongoDBAdmin
	api := o.Client.CoreV1().Secrets(o.Namespace)
	ref := o.Namespace + "/" + name
	s, err := adminSecret(ctx, o, name)
	if err != nil {
		return nil, err
	}
	l := serviceLogin{service: AdminLogin, secret: s}
	ch := LoginChange{Service: AdminLogin, Secret: name, From: string(s.Data["username"]), To: l.next()}
	switch {
	case s.Annotations[AnnotationRetire] != "":
		ch.Resumed, ch.From, ch.To = "revoking", s.Annotations[AnnotationRetire], string(s.Data["username"])
	case len(s.Data[keyNextUsername]) > 0:
		ch.Resumed = "granting"
	}
	// The old user can only be dropped once the pod's scripts read the
	// admin from the mounted Secret: without the mount, refused here,
	// before any engine of the rotation changes anything.
	if s.Annotations[AnnotationRetire] == "" {
		if _, err := al.AdminFileHolds(ctx, o.Engine, "username", s.Data["username"]); errors.Is(err, ErrNoAdminFile) {
			return nil, &RefusedError{Reason: o.Engine + ": " + err.Error()}
		}
	}
	st := &staged{res: &CredentialsResult{Engine: o.Engine, DryRun: o.DryRun, Logins: []LoginChange{ch}}, what: o.Engine + " admin"}
	w := &secretSteps{api: api, ref: ref, s: s}
	st.switchOver = func(ctx context.Context) error {
		if w.s.Annotations[AnnotationRetire] != "" {
			return nil // switched already; the old user is dropped last
		}
		if len(w.s.Data[keyNextUsername]) == 0 {
			pw, err := newPassword()
			if err != nil {
				return fmt.Errorf("a new password for %s: %w", ref, err)
			}
			owner, next := l.owner(), l.next()
			err = w.write(ctx, "writing the next admin", func(n *corev1.Secret) {
				n.Data[KeyOwner], n.Data[keyNextUsername], n.Data[keyNextPassword] = []byte(owner), []byte(next), pw
				n.Annotations[secrets.AnnotationPublicKeys] = addKeys(n.Annotations[secrets.AnnotationPublicKeys], KeyOwner, keyNextUsername)
			})
			if err != nil {
				return err
			}
		}
		next := Login{Username: string(w.s.Data[keyNextUsername]), Password: w.s.Data[keyNextPassword], Database: "admin"}
		say("%s: granting admin user %s", o.Engine, next.Username)
		if err := al.GrantAdmin(ctx, o.Engine, next); err != nil {
			return fmt.Errorf("granting the %s admin user %s (the current admin still works; run the rotation again): %w",
				o.Engine, next.Username, redactErr(err, next.Password))
		}
		old := string(w.s.Data["username"])
		err := w.write(ctx, "switching to the new admin", func(n *corev1.Secret) {
			n.Data["username"], n.Data["password"] = n.Data[keyNextUsername], n.Data[keyNextPassword]
			delete(n.Data, keyNextUsername)
			delete(n.Data, keyNextPassword)
			n.Annotations[AnnotationRetire] = old
			n.Annotations[AnnotationRotatedAt] = now.UTC().Format(time.RFC3339)
		})
		if err != nil {
			return err
		}
		say("%s: Secret %s now holds admin user %s", o.Engine, name, next.Username)
		return nil
	}
	st.revoke = func(ctx context.Context) error {
		old, user, pw := w.s.Annotations[AnnotationRetire], string(w.s.Data["username"]), w.s.Data["password"]
		if old != "" && old != user {
			say("%s: waiting for the kubelet to give the database's pod the new admin", o.Engine)
			refreshMounts(ctx, o.Client, o.Namespace, o.Engine, time.Now())
			werr := waitMounted(ctx, timeout, ErrNoAdminFile, pw, func(ctx context.Context) (bool, error) {
				return al.AdminFileHolds(ctx, o.Engine, "password", pw)
			})
			if werr != nil {
				return fmt.Errorf("the %s pod does not see its new admin yet, so the old admin user %s is kept (run the rotation again): %w",
					o.Engine, old, werr)
			}
			say("%s: revoking admin user %s", o.Engine, old)
			if err := al.RevokeAdmin(ctx, o.Engine, old); err != nil {
				return fmt.Errorf("revoking the old %s admin user %s (the new one works; run the rotation again): %w", o.Engine, old, err)
			}
		}
		return w.write(ctx, "recording the revocation", func(n *corev1.Secret) { delete(n.Annotations, AnnotationRetire) })
	}
	return st, nil
}
