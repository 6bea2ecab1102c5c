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
)

// afterRotation is how long traffic goes on after each rotation (about 50
// requests at trafficRate).
const afterRotation = 5 * time.Second

// rotateCertificates renews the platform's certificate, makes a new CA
// and retires the old one, each under traffic through the ingress
// controller, which must serve the new certificate without a failed
// request; then a client holding only the old CA is refused.
func (e *env) rotateCertificates(ctx context.Context, paths []string) {
	t := e.t
	rotate := func(args ...string) action.RotateCertificatesResult {
		var res action.RotateCertificatesResult
		e.onpremJSON(&res, append([]string{"rotate", "certificates", "--namespace", namespace, "--kubeconfig", e.kubeconfig}, args...)...)
		if !res.Changed {
			t.Fatalf("onprem rotate certificates %v changed nothing: %s", args, res.Summary)
		}
		return res
	}
	noFailure := func(r trafficResult) {
		if r.Failed > 0 || r.Sent == 0 {
			t.Fatalf("%d of %d requests failed: %v", r.Failed, r.Sent, r.Examples)
		}
	}
	// during runs op under traffic, then goes on reading for a while with
	// fresh connections (a new TLS handshake each: the certificate served
	// now), so that both sides of the change are exercised.
	during := func(name string, op func()) trafficResult {
		return e.underTraffic(name, func() {
			op()
			if tr, ok := e.client.Transport.(*http.Transport); ok {
				tr.CloseIdleConnections()
			}
			time.Sleep(afterRotation)
		}, paths...)
	}
	orig := e.tlsSecret(ctx)
	oldCA := orig.Data["ca.crt"]

	e.step("certificate renewed under the same CA, served without a failed request", func() {
		r := during("certificate renewal", func() {
			rotate()
			e.tookUp("the renewed certificate", e.tlsSecret(ctx))
		})
		noFailure(r)
		if s := e.tlsSecret(ctx); !bytes.Equal(s.Data["ca.crt"], oldCA) || bytes.Equal(s.Data["tls.crt"], orig.Data["tls.crt"]) {
			t.Fatal("the renewal changed the CA, or not the certificate")
		}
	})

	e.step("a new CA trusted beside the old one, then the old one retired: no request fails, the old CA is refused", func() {
		var res action.RotateCertificatesResult
		noFailure(during("a new CA (overlap)", func() { res = rotate("--ca") }))
		if res.TrustedCAs != 2 {
			t.Fatalf("after --ca ca.crt trusts %d CAs, want 2", res.TrustedCAs)
		}
		// The client takes the new ca.crt, as clients do during the overlap.
		e.ingressClient(ctx)
		noFailure(during("the old CA retired", func() {
			rotate("--retire-ca")
			e.tookUp("the new CA's certificate", e.tlsSecret(ctx))
		}))
		retired := e.tlsSecret(ctx)
		if err := e.handshake(oldCA); err == nil {
			t.Fatal("after the retirement a client holding only the old CA still accepts the platform's certificate")
		} else {
			t.Logf("a client holding only the old CA: %v", err)
		}
		if err := e.handshake(retired.Data["ca.crt"]); err != nil {
			t.Fatalf("a client holding the new ca.crt: %v", err)
		}
		// Clients from here on hold the new CA only.
		e.ingressClient(ctx)
		var list action.RotateListResult
		e.onpremJSON(&list, "rotate", "--list", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
		for _, it := range list.Secrets {
			if it.Secret == "onprem-tls" && len(it.Certificates) != 2 {
				t.Fatalf("rotate --list shows %d certificates in onprem-tls, want the certificate and one CA", len(it.Certificates))
			}
		}
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

// rotateCredentials rotates the services' database logins (PostgreSQL
// and MongoDB) while clients read records through the ingress controller
// (pipelines-api and gitops-api: MongoDB) and through audit-manager
// (PostgreSQL, by the API server's service proxy): no request may fail,
// the records are all there afterwards, and PostgreSQL refuses the old
// login while it takes the new one.
func (e *env) rotateCredentials(ctx context.Context, paths []string, records map[string]string) {
	t := e.t
	readSecret := func(name string) *corev1.Secret {
		s, err := e.cluster.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var key string
	for k := range records {
		key = k
		break
	}
	e.step("database logins, Redis's password and the PostgreSQL and MongoDB admins rotated under traffic (rotate credentials --all): no request fails, each old password is refused", func() {
		oldPG, oldMongo, oldMQ, oldRedis, oldAdmin, oldMongoAdmin := readSecret("onprem-audit-manager-postgresql"), readSecret("onprem-pipelines-api-mongodb"),
			readSecret("onprem-rabbitmq"), readSecret("onprem-redis"), readSecret("onprem-postgresql-admin"), readSecret("onprem-mongodb-admin")
		proxied := e.startProxyTraffic(ctx, "audit-manager", "records/"+key)
		var res action.RotateCredentialsResult
		r := e.underTraffic("database logins rotated", func() {
			e.onpremJSON(&res, "rotate", "credentials", "--all", "--namespace", namespace, "--kubeconfig", e.kubeconfig, "--timeout", "4m")
		}, paths...)
		pr := proxied.stop("database logins rotated (audit-manager through the service proxy)")
		e.timing.traffic = append(e.timing.traffic, pr)
		t.Logf("traffic to audit-manager during the rotation: %s", pr)
		for _, res := range []trafficResult{r, pr} {
			if res.Failed > 0 || res.Sent == 0 {
				t.Fatalf("%s: %d of %d requests failed: %v", res.Operation, res.Failed, res.Sent, res.Examples)
			}
		}
		var restarted []string
		switched := 0
		for _, er := range res.Engines {
			restarted = append(restarted, er.Restarted...)
			switched += len(er.Logins)
		}
		if len(res.Engines) != 6 || !slices.Contains(restarted, "Deployment/audit-manager") || !slices.Contains(restarted, "Deployment/pipelines-api") {
			t.Fatalf("the rotation switched %d logins on %d engines and restarted %v", switched, len(res.Engines), restarted)
		}
		t.Logf("switched %d logins; restarted %v", switched, restarted)
		e.checkRecords(ctx, records)

		// Logins alternate (a new username), MongoDB's admin too; Redis's
		// password and the PostgreSQL admin's change in place.
		for _, old := range []*corev1.Secret{oldPG, oldMongo, oldMQ, oldRedis, oldAdmin, oldMongoAdmin} {
			alternates := old != oldRedis && old != oldAdmin
			if now := readSecret(old.Name); bytes.Equal(now.Data["password"], old.Data["password"]) ||
				alternates && bytes.Equal(now.Data["username"], old.Data["username"]) {
				t.Fatalf("%s holds the same login after the rotation", old.Name)
			}
		}
		if err := e.pgLogin(ctx, readSecret(oldPG.Name)); err != nil {
			t.Fatalf("PostgreSQL refuses the new login: %v", err)
		}
		err := e.pgLogin(ctx, oldPG)
		if err == nil || !strings.Contains(err.Error(), "authentication failed") && !strings.Contains(err.Error(), "not permitted to log in") {
			t.Fatalf("PostgreSQL and the old login: %v, want it refused", err)
		}
		t.Logf("the old PostgreSQL login: %v", err)
		if err := e.pgLogin(ctx, readSecret(oldAdmin.Name)); err != nil {
			t.Fatalf("PostgreSQL refuses the admin's new password: %v", err)
		}
		if err := e.pgLogin(ctx, oldAdmin); err == nil || !strings.Contains(err.Error(), "authentication failed") {
			t.Fatalf("PostgreSQL and the admin's old password: %v, want it refused", err)
		}
		if err := e.mqLogin(ctx, readSecret(oldMQ.Name)); err != nil {
			t.Fatalf("RabbitMQ refuses the new login: %v", err)
		}
		if err := e.mqLogin(ctx, oldMQ); err == nil {
			t.Fatalf("RabbitMQ accepts the old login %s", oldMQ.Data["username"])
		} else {
			t.Logf("the old RabbitMQ login: %v", err)
		}
		if err := e.redisLogin(ctx, readSecret(oldRedis.Name)); err != nil {
			t.Fatalf("Redis refuses the new password: %v", err)
		}
		if err := e.redisLogin(ctx, oldRedis); err == nil {
			t.Fatal("Redis accepts the old password")
		} else {
			t.Logf("the old Redis password: %v", err)
		}
		if err := e.mongoAdminLogin(ctx, readSecret(oldMongoAdmin.Name)); err != nil {
			t.Fatalf("MongoDB refuses the new admin: %v", err)
		}
		if err := e.mongoAdminLogin(ctx, oldMongoAdmin); err == nil {
			t.Fatalf("MongoDB accepts the old admin %s", oldMongoAdmin.Data["username"])
		} else {
			t.Logf("the old MongoDB admin: %v", err)
		}
	})
}

// mongoAdminLogin dumps an empty database as the admin of MongoDB's
// Secret s, with mongodump in MongoDB's pod (the password in a private
// file, read from standard input): the admin's login checked by the tool
// onprem's backups use.
func (e *env) mongoAdminLogin(ctx context.Context, s *corev1.Secret) error {
	target, err := dbdump.Pod(ctx, e.cluster.Client, namespace, dbdump.MongoDB)
	if err != nil {
		return err
	}
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	cmd := []string{"sh", "-c", `set -eu
IFS= read -r password; cfg="$(mktemp)"; trap 'rm -f "$cfg"' EXIT
printf 'password: "%s"\n' "$password" > "$cfg"
mongodump --host 127.0.0.1 --port 27017 --username "$1" --authenticationDatabase admin --config "$cfg" \
  --db onprem_login_check --gzip --archive --quiet >/dev/null`, "sh", string(s.Data["username"])}
	var out strings.Builder
	if err := ex.Exec(ctx, target, cmd, strings.NewReader(string(s.Data["password"])+"\n"), &out); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// redisLogin pings Redis in its pod with the password of its Secret s,
// read by redis-cli from its environment, set from standard input.
func (e *env) redisLogin(ctx context.Context, s *corev1.Secret) error {
	target, err := dbdump.Pod(ctx, e.cluster.Client, namespace, dbdump.Redis)
	if err != nil {
		return err
	}
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
// authenticate_user in RabbitMQ's pod; the password travels on its
// standard input.
func (e *env) mqLogin(ctx context.Context, s *corev1.Secret) error {
	target, err := dbdump.Pod(ctx, e.cluster.Client, namespace, dbdump.RabbitMQ)
	if err != nil {
		return err
	}
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	cmd := []string{"sh", "-c", `IFS= read -r password; printf '%s\n' "$password" | exec rabbitmqctl --quiet authenticate_user "$1"`,
		"sh", string(s.Data["username"])}
	var out strings.Builder
	if err := ex.Exec(ctx, target, cmd, strings.NewReader(string(s.Data["password"])+"\n"), &out); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// pgLogin logs in to PostgreSQL, in its pod, over TCP (password
// authentication) with the login a service's Secret holds; the password
// travels on psql's standard input.
func (e *env) pgLogin(ctx context.Context, s *corev1.Secret) error {
	target, err := dbdump.Pod(ctx, e.cluster.Client, namespace, dbdump.PostgreSQL)
	if err != nil {
		return err
	}
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	cmd := []string{"sh", "-c", `IFS= read -r PGPASSWORD; export PGPASSWORD
exec psql --host=127.0.0.1 --username="$1" --dbname="$2" --no-password --no-psqlrc --tuples-only --command="SELECT 1"`,
		"sh", string(s.Data["username"]), string(s.Data["database"])}
	return ex.Exec(ctx, target, cmd, strings.NewReader(string(s.Data["password"])+"\n"), io.Discard)
}

// startProxyTraffic reads path of service through the API server's
// service proxy at trafficRate/2 until stop, counting what fails.
func (e *env) startProxyTraffic(ctx context.Context, service, path string) *traffic {
	ctx, cancel := context.WithCancel(ctx)
	tr := &traffic{cancel: cancel, done: make(chan struct{}), started: time.Now()}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(2 * time.Second / trafficRate)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := e.cluster.Client.CoreV1().RESTClient().Get().
				AbsPath("/api/v1/namespaces", namespace, "services", service+":http", "proxy", path).DoRaw(rctx)
			rcancel()
			if ctx.Err() != nil {
				return
			}
			tr.record(path, err)
		}
	}()
	return tr
}
