//go:build linux

package platform

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/rotate"
)

// afterRotation is how long traffic goes on after a certificate changes
// (about 50 requests at trafficRate), with fresh connections.
const afterRotation = 5 * time.Second

// rotateEverything rotates every kind of secret onprem generated, one
// after the other, under one set of clients that run the whole time:
// records written and read through the ingress controller, tokens signed
// and checked by pipelines-api (and one signed before), and audit-manager
// (PostgreSQL) read through the API server's service proxy. In order: the
// serving certificate renewed under the same CA; a new CA trusted beside
// the old one (the clients take the new bundle, as clients do during the
// overlap); every database login, Redis's password and both admins
// (rotate credentials --all); the signing and encryption keys; the old CA
// retired. No request may fail. Afterwards every record written before
// and during is read back; each old password is refused by its database;
// a client holding only the old CA is refused; and once the old keys are
// retired (rotate keys --retire) the token and the value of the old keys
// are refused.
func (e *env) rotateEverything(ctx context.Context, paths []string, records map[string]string) {
	t := e.t
	readSecret := func(name string) *corev1.Secret { return e.secret(ctx, name) }
	var key string
	for k := range records {
		key = k
		break
	}
	const keysPrefix = "/api" // pipelines-api, which has keys
	e.step("certificates (renewed, a new CA), every credential and the keys rotated under one client, then the old CA retired: "+
		"no request fails, every record is read back, each old password and the old CA are refused", func() {
		orig := e.tlsSecret(ctx)
		oldCA := orig.Data["ca.crt"]
		oldPG, oldMongo, oldMQ, oldRedis, oldAdmin, oldMongoAdmin := readSecret("onprem-audit-manager-postgresql"), readSecret("onprem-pipelines-api-mongodb"),
			readSecret("onprem-rabbitmq"), readSecret("onprem-redis"), readSecret("onprem-postgresql-admin"), readSecret("onprem-mongodb-admin")
		var tok struct{ Token string }
		decodeJSON(t, e.request(http.MethodPost, keysPrefix+"/tokens", "", http.StatusOK), &tok)
		var sealed struct{ Sealed string }
		decodeJSON(t, e.request(http.MethodPost, keysPrefix+"/sealed", "sealed before the rotation", http.StatusOK), &sealed)

		// The clients trust the CAs of onprem-tls's ca.crt as last read.
		trust := newTrust(t, oldCA)
		transport := trust.transport(e.nodeIP)
		client := &http.Client{Timeout: 5 * time.Second, Transport: transport}
		recs := e.startRecordTraffic(client, paths, nil)
		tokens := e.startTokenTraffic(ctx, client, keysPrefix, tok.Token)
		proxied := e.startProxyTraffic(ctx, "audit-manager", "records/"+key)
		took := map[string]time.Duration{}
		timed := func(what string, op func()) {
			start := time.Now()
			op()
			took[what] = time.Since(start)
			t.Logf("%s: done in %.1f s, under traffic", what, took[what].Seconds())
		}
		certificates := func(args ...string) action.RotateCertificatesResult {
			var res action.RotateCertificatesResult
			e.onpremJSON(&res, append([]string{"rotate", "certificates", "--namespace", namespace, "--kubeconfig", e.kubeconfig}, args...)...)
			if !res.Changed {
				t.Fatalf("onprem rotate certificates %v changed nothing: %s", args, res.Summary)
			}
			return res
		}
		// fresh makes the clients connect again (a new TLS handshake: the
		// certificate served now), and lets traffic run on it a while.
		fresh := func() {
			transport.CloseIdleConnections()
			time.Sleep(afterRotation)
		}

		timed("certificate renewed", func() {
			certificates()
			e.tookUp("the renewed certificate", e.tlsSecret(ctx))
			if s := e.tlsSecret(ctx); !bytes.Equal(s.Data["ca.crt"], oldCA) || bytes.Equal(s.Data["tls.crt"], orig.Data["tls.crt"]) {
				t.Fatal("the renewal changed the CA, or not the certificate")
			}
			fresh()
		})
		timed("a new CA trusted beside the old one", func() {
			if res := certificates("--ca"); res.TrustedCAs != 2 {
				t.Fatalf("after --ca ca.crt trusts %d CAs, want 2", res.TrustedCAs)
			}
			trust.set(t, e.tlsSecret(ctx).Data["ca.crt"])
			fresh()
		})
		var creds action.RotateCredentialsResult
		timed("every credential rotated", func() {
			e.onpremJSON(&creds, "rotate", "credentials", "--all", "--namespace", namespace, "--kubeconfig", e.kubeconfig, "--timeout", "4m")
		})
		var keys rotate.KeysResult
		timed("keys rotated", func() {
			e.onpremJSON(&keys, "rotate", "keys", "--namespace", namespace, "--kubeconfig", e.kubeconfig, "--timeout", "4m")
		})
		timed("the old CA retired", func() {
			certificates("--retire-ca")
			e.tookUp("the new CA's certificate", e.tlsSecret(ctx))
			fresh()
		})

		written := recs.stopWriting()
		results := []trafficResult{recs.stop("every rotation (records written and read through the ingress controller)"),
			tokens.stop("every rotation (tokens signed and checked through pipelines-api)"),
			proxied.stop("every rotation (audit-manager through the service proxy)")}
		for _, r := range results {
			e.timing.traffic = append(e.timing.traffic, r)
			t.Logf("traffic during %s", r)
			if r.Failed > 0 || r.Sent == 0 {
				t.Fatalf("%s: %d of %d requests failed: %v", r.Operation, r.Failed, r.Sent, r.Examples)
			}
		}
		if len(written) == 0 {
			t.Fatal("no record was written during the rotations")
		}

		// The certificates: a client holding only the old CA is refused;
		// from here on clients hold the new CA only.
		if err := e.handshake(oldCA); err == nil {
			t.Fatal("after the retirement a client holding only the old CA still accepts the platform's certificate")
		} else {
			t.Logf("a client holding only the old CA: %v", err)
		}
		if err := e.handshake(e.tlsSecret(ctx).Data["ca.crt"]); err != nil {
			t.Fatalf("a client holding the new ca.crt: %v", err)
		}
		e.ingressClient(ctx)
		var list action.RotateListResult
		e.onpremJSON(&list, "rotate", "--list", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
		for _, it := range list.Secrets {
			if it.Secret == "onprem-tls" && len(it.Certificates) != 2 {
				t.Fatalf("rotate --list shows %d certificates in onprem-tls, want the certificate and one CA", len(it.Certificates))
			}
		}

		// Every record: those of before, and those written during.
		e.checkRecords(ctx, records)
		e.checkWritten(written)

		// The credentials.
		var restarted []string
		switched := 0
		for _, er := range creds.Engines {
			restarted = append(restarted, er.Restarted...)
			switched += len(er.Logins)
		}
		if len(creds.Engines) != 6 || !slices.Contains(restarted, "Deployment/audit-manager") || !slices.Contains(restarted, "Deployment/pipelines-api") {
			t.Fatalf("the rotation switched %d logins on %d engines and restarted %v", switched, len(creds.Engines), restarted)
		}
		t.Logf("switched %d logins on %d engines; restarted %v", switched, len(creds.Engines), restarted)
		e.oldPasswordsRefused(ctx, readSecret, oldPG, oldMongo, oldMQ, oldRedis, oldAdmin, oldMongoAdmin)

		// The keys: the old token and sealed value are good until the old
		// keys are retired, refused after.
		if !keys.Changed || keys.RingAfter != 2 || len(keys.Restarted) == 0 {
			t.Fatalf("rotate keys: %+v", keys)
		}
		e.request(http.MethodGet, keysPrefix+"/tokens/"+tok.Token, "", http.StatusOK)
		if got := e.request(http.MethodGet, keysPrefix+"/sealed/"+sealed.Sealed, "", http.StatusOK); !strings.Contains(string(got), "sealed before the rotation") {
			t.Fatalf("the value sealed before the rotation opens as %s", got)
		}
		var retired rotate.KeysResult
		e.onpremJSON(&retired, "rotate", "keys", "--retire", "--namespace", namespace, "--kubeconfig", e.kubeconfig, "--timeout", "4m")
		if !retired.Changed || retired.RingAfter != 1 {
			t.Fatalf("rotate keys --retire: %+v", retired)
		}
		e.request(http.MethodGet, keysPrefix+"/tokens/"+tok.Token, "", http.StatusUnauthorized)
		e.request(http.MethodGet, keysPrefix+"/sealed/"+sealed.Sealed, "", http.StatusUnauthorized)
		decodeJSON(t, e.request(http.MethodPost, keysPrefix+"/tokens", "", http.StatusOK), &tok)
		e.request(http.MethodGet, keysPrefix+"/tokens/"+tok.Token, "", http.StatusOK)
		t.Log("after rotate keys --retire: the token and the value of the old keys are refused, a new token is accepted")
	})
}

func (e *env) tlsSecret(ctx context.Context) *corev1.Secret {
	e.t.Helper()
	s, err := e.cluster.Client.CoreV1().Secrets(namespace).Get(ctx, "onprem-tls", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("the platform's TLS Secret: %v", err)
	}
	return s
}

// tookUp waits until the ingress controller serves the certificate of s,
// and logs how long that took.
func (e *env) tookUp(what string, s *corev1.Secret) {
	e.t.Helper()
	b, _ := pem.Decode(s.Data["tls.crt"])
	if b == nil {
		e.t.Fatal("onprem-tls has no certificate")
	}
	start := time.Now()
	var served []byte
	for time.Since(start) < 2*time.Minute {
		if served = e.servedCertificate(); bytes.Equal(served, b.Bytes) {
			e.t.Logf("the ingress controller serves %s %.1f s after the rotation", what, time.Since(start).Seconds())
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	e.t.Fatalf("the ingress controller still does not serve %s after 2 minutes", what)
}

// servedCertificate is the certificate (DER) the ingress controller
// presents for the platform's domain, nil when the handshake fails.
func (e *env) servedCertificate() []byte {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(e.nodeIP, strconv.Itoa(httpsNodePort)),
		&tls.Config{ServerName: domain, InsecureSkipVerify: true}) // only read, to compare with the Secret
	if err != nil {
		return nil
	}
	defer c.Close()
	if peer := c.ConnectionState().PeerCertificates; len(peer) > 0 {
		return peer[0].Raw
	}
	return nil
}

// handshake connects to the platform's domain trusting only caPEM.
func (e *env) handshake(caPEM []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no CA certificate")
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(e.nodeIP, strconv.Itoa(httpsNodePort)), &tls.Config{ServerName: domain, RootCAs: pool})
	if err != nil {
		return err
	}
	return c.Close()
}

// oldPasswordsRefused checks each Secret's login after a rotation: a new
// one (a new username too where logins alternate), accepted by its
// database, and the old one refused, on every member of a replicated
// database (Redis's password is set on each member; PostgreSQL's and
// RabbitMQ's logins reach the others through replication and the
// cluster). The MongoDB Secrets are nil where MongoDB is external.
func (e *env) oldPasswordsRefused(ctx context.Context, readSecret func(string) *corev1.Secret, oldPG, oldMongo, oldMQ, oldRedis, oldAdmin, oldMongoAdmin *corev1.Secret) {
	t := e.t
	// Logins alternate (a new username), MongoDB's admin too; Redis's
	// password and the PostgreSQL admin's change in place.
	for _, old := range []*corev1.Secret{oldPG, oldMongo, oldMQ, oldRedis, oldAdmin, oldMongoAdmin} {
		if old == nil {
			continue
		}
		alternates := old != oldRedis && old != oldAdmin
		if now := readSecret(old.Name); bytes.Equal(now.Data["password"], old.Data["password"]) ||
			alternates && bytes.Equal(now.Data["username"], old.Data["username"]) {
			t.Fatalf("%s holds the same login after the rotation", old.Name)
		}
	}
	for _, target := range e.dbMembers(ctx, dbdump.PostgreSQL) {
		if err := e.pgLogin(ctx, target, readSecret(oldPG.Name)); err != nil {
			t.Fatalf("PostgreSQL (%s) refuses the new login: %v", target.Pod, err)
		}
		err := e.pgLogin(ctx, target, oldPG)
		if err == nil || !strings.Contains(err.Error(), "authentication failed") && !strings.Contains(err.Error(), "not permitted to log in") {
			t.Fatalf("PostgreSQL (%s) and the old login: %v, want it refused", target.Pod, err)
		}
		t.Logf("the old PostgreSQL login (%s): %v", target.Pod, err)
		if err := e.pgLogin(ctx, target, readSecret(oldAdmin.Name)); err != nil {
			t.Fatalf("PostgreSQL (%s) refuses the admin's new password: %v", target.Pod, err)
		}
		if err := e.pgLogin(ctx, target, oldAdmin); err == nil || !strings.Contains(err.Error(), "authentication failed") {
			t.Fatalf("PostgreSQL (%s) and the admin's old password: %v, want it refused", target.Pod, err)
		}
	}
	for _, target := range e.dbMembers(ctx, dbdump.RabbitMQ) {
		if err := e.mqLogin(ctx, target, readSecret(oldMQ.Name)); err != nil {
			t.Fatalf("RabbitMQ (%s) refuses the new login: %v", target.Pod, err)
		}
		if err := e.mqLogin(ctx, target, oldMQ); err == nil {
			t.Fatalf("RabbitMQ (%s) accepts the old login %s", target.Pod, oldMQ.Data["username"])
		} else {
			t.Logf("the old RabbitMQ login (%s): %v", target.Pod, err)
		}
	}
	for _, target := range e.dbMembers(ctx, dbdump.Redis) {
		if err := e.redisLogin(ctx, target, readSecret(oldRedis.Name)); err != nil {
			t.Fatalf("Redis (%s) refuses the new password: %v", target.Pod, err)
		}
		if err := e.redisLogin(ctx, target, oldRedis); err == nil {
			t.Fatalf("Redis (%s) accepts the old password", target.Pod)
		} else {
			t.Logf("the old Redis password (%s): %v", target.Pod, err)
		}
	}
	for _, old := range []*corev1.Secret{oldMongo, oldMongoAdmin} {
		if old == nil {
			continue
		}
		authDB := string(old.Data["database"])
		if old == oldMongoAdmin {
			authDB = "admin"
		}
		now := readSecret(old.Name)
		if err := e.mongoLogin(ctx, string(now.Data["username"]), string(now.Data["password"]), authDB); err != nil {
			t.Fatalf("MongoDB refuses the new login of %s: %v", old.Name, err)
		}
		if err := e.mongoLogin(ctx, string(old.Data["username"]), string(old.Data["password"]), authDB); err == nil {
			t.Fatalf("MongoDB accepts the old login %s of %s", old.Data["username"], old.Name)
		} else {
			t.Logf("the old MongoDB login of %s: %v", old.Name, err)
		}
	}
}

// dbMembers are the running members of a database's StatefulSet (one
// without high availability).
func (e *env) dbMembers(ctx context.Context, engine string) []podexec.Target {
	e.t.Helper()
	targets, err := dbdump.Members(ctx, e.cluster.Client, namespace, engine)
	if err != nil {
		e.t.Fatal(err)
	}
	return targets
}

// mongoLogin dumps an empty database as user (with password),
// authenticated in database authDB, with mongodump in MongoDB's pod (the
// password in a private file, read from standard input): a login checked
// by the tool onprem's backups use.
func (e *env) mongoLogin(ctx context.Context, user, password, authDB string) error {
	target, err := dbdump.Pod(ctx, e.cluster.Client, namespace, dbdump.MongoDB)
	if err != nil {
		return err
	}
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	cmd := []string{"sh", "-c", `set -eu
IFS= read -r password; cfg="$(mktemp)"; trap 'rm -f "$cfg"' EXIT
printf 'password: "%s"\n' "$password" > "$cfg"
mongodump --host 127.0.0.1 --port 27017 --username "$1" --authenticationDatabase "$2" --config "$cfg" \
  --db "$2" --gzip --archive --quiet >/dev/null`, "sh", user, authDB}
	var out strings.Builder
	if err := ex.Exec(ctx, target, cmd, strings.NewReader(password+"\n"), &out); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// redisLogin pings Redis in its pod target with the password of its
// Secret s, read by redis-cli from its environment, set from standard
// input.
func (e *env) redisLogin(ctx context.Context, target podexec.Target, s *corev1.Secret) error {
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	cmd := []string{"sh", "-c", `IFS= read -r REDISCLI_AUTH; export REDISCLI_AUTH
out="$(redis-cli --no-auth-warning ping 2>&1)"; [ "$out" = PONG ] || { echo "$out"; exit 1; }`}
	var out strings.Builder
	if err := ex.Exec(ctx, target, cmd, strings.NewReader(string(s.Data["password"])+"\n"), &out); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// mqLogin checks a login (RabbitMQ's Secret) with rabbitmqctl
// authenticate_user in RabbitMQ's pod target; the password travels on its
// standard input.
func (e *env) mqLogin(ctx context.Context, target podexec.Target, s *corev1.Secret) error {
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	cmd := []string{"sh", "-c", `IFS= read -r password; printf '%s\n' "$password" | exec rabbitmqctl --quiet authenticate_user "$1"`,
		"sh", string(s.Data["username"])}
	var out strings.Builder
	if err := ex.Exec(ctx, target, cmd, strings.NewReader(string(s.Data["password"])+"\n"), &out); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// pgLogin logs in to PostgreSQL, in its pod target, over TCP (password
// authentication) with the login a service's Secret holds; the password
// travels on psql's standard input.
func (e *env) pgLogin(ctx context.Context, target podexec.Target, s *corev1.Secret) error {
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	cmd := []string{"sh", "-c", `IFS= read -r PGPASSWORD; export PGPASSWORD
exec psql --host=127.0.0.1 --username="$1" --dbname="$2" --no-password --no-psqlrc --tuples-only --command="SELECT 1"`,
		"sh", string(s.Data["username"]), string(s.Data["database"])}
	return ex.Exec(ctx, target, cmd, strings.NewReader(string(s.Data["password"])+"\n"), io.Discard)
}

// startProxyTraffic reads path of service through the API server's
// service proxy at trafficRate/2 until stop, counting what fails.
func (e *env) startProxyTraffic(ctx context.Context, service, path string) *traffic {
	tr, ctx := newTraffic(ctx)
	tr.run(ctx, 2*time.Second/trafficRate, false, func(ctx context.Context, _ int) {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := e.cluster.Client.CoreV1().RESTClient().Get().
			AbsPath("/api/v1/namespaces", namespace, "services", service+":http", "proxy", path).DoRaw(rctx)
		rcancel()
		if ctx.Err() != nil {
			return
		}
		tr.record(path, err)
	})
	return tr
}
