package rotate

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/secrets"
)

// Redis is the engine whose one password (the Secret credentials.Redis)
// every service shares.
const Redis = "redis"

// redisUser is the user the password belongs to: Redis's default user,
// which the chart's --requirepass sets.
const redisUser = "default"

// RedisPasswords changes Redis's password in its pod; PodLogins does it.
type RedisPasswords interface {
	// AddPassword gives Redis's default user next as a second password,
	// authenticating with any password it may still hold (current, next,
	// the pod's mounted file or its environment).
	AddPassword(ctx context.Context, current, next []byte) error
	// FileHolds says whether the password file mounted in Redis's pod
	// (which its readiness probe reads) holds password yet.
	FileHolds(ctx context.Context, password []byte) (bool, error)
	// KeepOnly makes password the default user's only password.
	KeepOnly(ctx context.Context, password []byte) error
}

// redisRotation rotates Redis's password with an overlap, in the order of
// Credentials: the next password is written to the Secret, then added to
// the default user beside the current one; the Secret switches to it; the
// services roll (not Redis itself: a restart would interrupt them all);
// once the file that Redis's readiness probe reads holds the new password,
// it becomes the only one, and the old one is refused. Redis's own
// --requirepass, from its environment, is the new password after its next
// restart, which reads the Secret.
func redisRotation(ctx context.Context, o CredentialsOptions, newPassword func() ([]byte, error), now time.Time, timeout time.Duration,
	say func(string, ...any)) (*staged, error) {
	rp, ok := o.Logins.(RedisPasswords)
	if !ok {
		return nil, errors.New("rotating Redis's password: no way to reach Redis (RedisPasswords)")
	}
	api := o.Client.CoreV1().Secrets(o.Namespace)
	ref := o.Namespace + "/" + credentials.Redis
	s, err := api.Get(ctx, credentials.Redis, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, refused("secret %s does not exist (is the platform installed in namespace %s, with Redis run by onprem?)", ref, o.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", ref, err)
	}
	if s.Labels[secrets.LabelGenerated] != "true" {
		return nil, OwnLoginRefused(o.Namespace, Redis, SharedLogin)
	}
	if len(s.Data["password"]) == 0 {
		return nil, fmt.Errorf("secret %s has no password: run 'onprem install' to complete it", ref)
	}
	ch := LoginChange{Service: SharedLogin, Secret: credentials.Redis, From: redisUser + " (current password)", To: redisUser + " (new password)"}
	switch {
	case s.Annotations[AnnotationRetire] != "":
		ch.Resumed = "revoking"
	case len(s.Data[keyNextPassword]) > 0:
		ch.Resumed = "granting"
	}
	st := &staged{res: &CredentialsResult{Engine: Redis, DryRun: o.DryRun, Logins: []LoginChange{ch}},
		secrets: []string{credentials.Redis}, what: "redis password"}
	w := &secretSteps{api: api, ref: ref, s: s}
	st.switchOver = func(ctx context.Context) error {
		if w.s.Annotations[AnnotationRetire] != "" {
			return nil // switched already; the services restart next
		}
		current, next, err := w.nextPassword(ctx, newPassword)
		if err != nil {
			return err
		}
		say("redis: adding the new password to user %s", redisUser)
		if err := rp.AddPassword(ctx, current, next); err != nil {
			return fmt.Errorf("adding Redis's new password (the services still use the old one; run the rotation again): %w",
				redactErr(redactErr(err, next), current))
		}
		err = w.write(ctx, "switching to the new password", func(n *corev1.Secret) {
			n.Data["password"] = n.Data[keyNextPassword]
			delete(n.Data, keyNextPassword)
			n.Annotations[AnnotationRetire] = redisUser + " (previous password)"
			n.Annotations[AnnotationRotatedAt] = now.UTC().Format(time.RFC3339)
		})
		if err != nil {
			return err
		}
		say("redis: Secret %s now holds the new password", credentials.Redis)
		return nil
	}
	st.revoke = func(ctx context.Context) error {
		pw := w.s.Data["password"]
		say("redis: waiting for the kubelet to update the password file in Redis's pod")
		refreshMounts(ctx, o.Client, o.Namespace, Redis, time.Now())
		werr := waitMounted(ctx, timeout, ErrNoPasswordFile, pw, func(ctx context.Context) (bool, error) { return rp.FileHolds(ctx, pw) })
		if werr != nil {
			return fmt.Errorf("Redis's pod does not see its new password in %s yet, so the old one is kept (run the rotation again): %w",
				redisAuthFile, werr)
		}
		say("redis: revoking the old password")
		if err := rp.KeepOnly(ctx, pw); err != nil {
			return fmt.Errorf("revoking Redis's old password (the services use the new one; run the rotation again): %w", redactErr(err, pw))
		}
		return w.write(ctx, "recording the revocation", func(n *corev1.Secret) { delete(n.Annotations, AnnotationRetire) })
	}
	return st, nil
}

// ErrNoPasswordFile: Redis's pod does not mount its password as a file,
// which its readiness probe must read once the old password is refused.
var ErrNoPasswordFile = errors.New("Redis's pod does not mount its password as a file (" + redisAuthFile + "): its chart predates " +
	"password rotation; run 'onprem install' (or the upgrade) first, which restarts Redis once with it, then rotate again; " +
	"the old password is kept meanwhile")

// redisAuthFile is where the redis chart mounts Redis's password.
const redisAuthFile = "/etc/redis-auth/password"

// redisAddPassword reads the current password and the next, a line each,
// and adds the next to the default user, authenticated with the first of
// current, next, the mounted file's and the environment's that Redis
// accepts. redis-cli reads its command on its standard input: no value is
// on a command line.
var redisAddPassword = []string{"sh", "-c", `set -eu
IFS= read -r current; IFS= read -r next
host="${ONPREM_DB_HOST:-127.0.0.1}"; port="${ONPREM_DB_PORT:-6379}"
auth="${ONPREM_REDIS_AUTH_FILE:-` + redisAuthFile + `}"
file=""; if [ -r "$auth" ]; then file="$(cat "$auth")"; fi
for p in "$current" "$next" "$file" "${REDIS_PASSWORD:-}"; do
  [ -n "$p" ] || continue
  if [ "$(REDISCLI_AUTH="$p" redis-cli -h "$host" -p "$port" --no-auth-warning ping 2>/dev/null)" = PONG ]; then
    out="$(printf 'ACL SETUSER default on >%s\n' "$next" | REDISCLI_AUTH="$p" redis-cli -h "$host" -p "$port" --no-auth-warning)"
    if [ "$out" = OK ]; then exit 0; fi
    echo "ACL SETUSER default: $out" >&2; exit 1
  fi
done
echo "Redis accepts none of the passwords onprem knows of (the Secret's current and next, the mounted file's, the environment's)" >&2
exit 1
`}

// redisFileHolds exits 0 when the mounted password file holds the
// password read on standard input, 3 when it does not yet, 4 when there is
// no such file.
var redisFileHolds = []string{"sh", "-c", `IFS= read -r want
auth="${ONPREM_REDIS_AUTH_FILE:-` + redisAuthFile + `}"
[ -r "$auth" ] || exit 4
[ "$(cat "$auth")" = "$want" ] || exit 3
`}

// redisKeepOnly makes the password read on standard input the default
// user's only one, authenticated with it.
var redisKeepOnly = []string{"sh", "-c", `set -eu
IFS= read -r pw
host="${ONPREM_DB_HOST:-127.0.0.1}"; port="${ONPREM_DB_PORT:-6379}"
out="$(printf 'ACL SETUSER default resetpass >%s\n' "$pw" | REDISCLI_AUTH="$pw" redis-cli -h "$host" -p "$port" --no-auth-warning)"
if [ "$out" != OK ]; then echo "ACL SETUSER default: $out" >&2; exit 1; fi
`}

// AddPassword implements RedisPasswords.
func (p PodLogins) AddPassword(ctx context.Context, current, next []byte) error {
	if err := oneLine(string(current), string(next)); err != nil {
		return err
	}
	in := string(current) + "\n" + string(next) + "\n"
	return redactErr(p.runEach(ctx, Redis, redisAddPassword, in, next), current)
}

// FileHolds implements RedisPasswords.
func (p PodLogins) FileHolds(ctx context.Context, password []byte) (bool, error) {
	err := p.runEach(ctx, Redis, redisFileHolds, string(password)+"\n", password)
	return fileHolds(err, ErrNoPasswordFile)
}

// KeepOnly implements RedisPasswords.
func (p PodLogins) KeepOnly(ctx context.Context, password []byte) error {
	if err := oneLine(string(password)); err != nil {
		return err
	}
	return p.runEach(ctx, Redis, redisKeepOnly, string(password)+"\n", password)
}
