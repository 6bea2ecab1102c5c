package preflight

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-version"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"onprem.dev/onprem/installer/config"
)

// The oldest server versions of the external services the platform
// supports.
const (
	minMongoDB    = "6.0"
	minPostgreSQL = "14"
	minRedis      = "6.2"
	minRabbitMQ   = "3.11"
)

// Bounds of the steps of a database check, each also bounded by the
// check's context (variables for tests).
var (
	dbDialTimeout      = 10 * time.Second
	dbHandshakeTimeout = 15 * time.Second
)

// fromHereNote is added to the details of every database check that
// opened a connection: the check runs on the operator's machine.
const fromHereNote = "advisory: this check connects from the machine running onprem; a pass proves the server is reachable from here, " +
	"but the platform's pods connect from the cluster's network, which may resolve, route or filter differently " +
	"(DNS, egress firewalls, NetworkPolicies, proxies)"

// dbEndpoint is an external service's connection as its Secret gives it.
type dbEndpoint struct {
	// Secret is namespace/name of the connection Secret.
	Secret   string
	Host     string
	Port     int
	Username string
	Password string
	TLS      bool
	// ReplicaSet is MongoDB's replica set name (key replicaSet, optional):
	// Host is then a seed member and the set's name is checked.
	ReplicaSet string
}

// Addr is host:port.
func (e *dbEndpoint) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// tlsConfig verifies the server's certificate against this machine's
// trusted roots and the Secret's host.
func (e *dbEndpoint) tlsConfig() *tls.Config {
	return &tls.Config{ServerName: e.Host, MinVersion: tls.VersionTLS12}
}

// problem is what kind of thing went wrong in a handshake.
type problem int

const (
	// problemProtocol: the server answered, but not as the protocol says
	// (another service on that port, a proxy, a timeout mid-way).
	problemProtocol problem = iota
	// problemCredentials: the server refused the username or password.
	problemCredentials
	// problemTLS: the TLS handshake failed.
	problemTLS
	// problemUnreachable: no connection could be opened.
	problemUnreachable
)

// handshakeError is a classified handshake failure.
type handshakeError struct {
	kind problem
	err  error
}

func (e *handshakeError) Error() string { return e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

func credentialsError(err error) error { return &handshakeError{kind: problemCredentials, err: err} }

// classifyNetError turns a transport-level failure into a handshakeError:
// TLS problems, unreachable servers, or a protocol problem.
func classifyNetError(err error) error {
	var he *handshakeError
	if errors.As(err, &he) {
		return err
	}
	if isTLSError(err) {
		return &handshakeError{kind: problemTLS, err: err}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &handshakeError{kind: problemUnreachable, err: err}
	}
	return &handshakeError{kind: problemProtocol, err: err}
}

func isTLSError(err error) bool {
	var (
		rec   tls.RecordHeaderError
		alert tls.AlertError
		cv    *tls.CertificateVerificationError
		ua    x509.UnknownAuthorityError
		hn    x509.HostnameError
		ci    x509.CertificateInvalidError
	)
	if errors.As(err, &rec) || errors.As(err, &alert) || errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "tls:") || strings.Contains(s, "x509:") || strings.Contains(s, "tls error") || strings.Contains(s, "refused TLS")
}

// databaseSpec describes the check of one external service.
type databaseSpec struct {
	// name is the service's name in spec.databases (mongodb, ...).
	name string
	// product is how operators call it (MongoDB, ...).
	product string
	// min is the oldest supported server version.
	min string
	// userOptional: the username key may be missing (Redis before ACLs).
	userOptional bool
	// handshake connects with the endpoint's credentials and returns the
	// server's version. Its errors should be *handshakeError; others
	// are classified as transport failures.
	handshake func(ctx context.Context, ep *dbEndpoint) (string, error)
}

func (s databaseSpec) check() Check {
	return Check{
		ID:       "database." + s.name,
		Title:    fmt.Sprintf("An external %s answers a real handshake with the credentials of its Secret, and its version is %s or newer", s.product, s.min),
		Severity: Blocking,
		Run:      s.run,
	}
}

func (s databaseSpec) field() string { return "spec.databases." + s.name + ".external.secretName" }

func connFail(msg, remediation string, details ...string) Outcome {
	return Outcome{Result: Fail, Message: msg, Remediation: remediation, Details: details}
}

func connDatabaseOf(in *config.Installation, name string) *config.Database {
	for _, d := range in.Spec.Databases.All() {
		if d.Name == name {
			return d.Database
		}
	}
	return nil
}

func connNamespace(in *config.Installation) string {
	if in.Spec.Namespace != "" {
		return in.Spec.Namespace
	}
	return "onprem"
}

func (s databaseSpec) run(ctx context.Context, env *Env) Outcome {
	if env == nil || env.Installation == nil {
		return connFail("the check could not run: no configuration was loaded", "run preflight with a valid onprem.yaml (-c onprem.yaml)")
	}
	db := connDatabaseOf(env.Installation, s.name)
	if db == nil || !db.IsExternal() {
		return Passed("in-cluster: onprem installs and runs %s itself", s.product)
	}
	ep, out := s.endpoint(ctx, env, db.External.SecretName)
	if out != nil {
		return *out
	}
	return s.connect(ctx, ep)
}

// endpoint reads the connection Secret; a non-nil Outcome is the failure.
func (s databaseSpec) endpoint(ctx context.Context, env *Env, secretName string) (*dbEndpoint, *Outcome) {
	keysHelp := "keys host, port, username, password and optionally tls: \"true\""
	if s.userOptional {
		keysHelp = "keys host, port, password, optionally username (an ACL user) and tls: \"true\""
	}
	if secretName == "" {
		o := connFail(fmt.Sprintf("%s is external but %s is not set", s.product, s.field()),
			fmt.Sprintf("set %s to a Secret in the platform namespace with %s", s.field(), keysHelp))
		return nil, &o
	}
	ns := connNamespace(env.Installation)
	ref := ns + "/" + secretName
	if env.Cluster == nil || env.Cluster.Client == nil {
		o := connFail(fmt.Sprintf("the check could not run: no cluster connection to read Secret %s", ref),
			"connect onprem to the platform's cluster (--kubeconfig, --context) and run preflight again")
		return nil, &o
	}
	sec, err := env.Secret(ctx, ns, secretName)
	switch {
	case apierrors.IsNotFound(err):
		o := connFail(fmt.Sprintf("the connection Secret %s of the external %s (%s) does not exist", ref, s.product, s.field()),
			fmt.Sprintf("create it before installing: kubectl -n %s create secret generic %s --from-literal=host=... --from-literal=port=... --from-literal=username=... --from-literal=password=... (%s)", ns, secretName, keysHelp))
		return nil, &o
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		o := connFail(fmt.Sprintf("the check could not run: not allowed to read Secret %s: %v", ref, err),
			fmt.Sprintf("run onprem with an identity that may get secrets in namespace %s (the install needs it too)", ns))
		return nil, &o
	case err != nil:
		o := connFail(fmt.Sprintf("the check could not run: reading Secret %s failed: %v", ref, err),
			"check the connection to the cluster and run preflight again")
		return nil, &o
	}
	val := func(k string) string { return strings.TrimSpace(string(sec.Data[k])) }
	required := []string{"host", "port", "username", "password"}
	if s.userOptional {
		required = []string{"host", "port", "password"}
	}
	var missing []string
	for _, k := range required {
		if val(k) == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		o := connFail(fmt.Sprintf("Secret %s (%s) lacks the keys %s", ref, s.field(), strings.Join(missing, ", ")),
			fmt.Sprintf("add the missing keys to Secret %s: it needs %s", ref, keysHelp))
		return nil, &o
	}
	port, err := strconv.Atoi(val("port"))
	if err != nil || port < 1 || port > 65535 {
		o := connFail(fmt.Sprintf("Secret %s: port %q is not a port number (1-65535)", ref, val("port")),
			fmt.Sprintf("set the key port of Secret %s to the %s server's TCP port", ref, s.product))
		return nil, &o
	}
	ep := &dbEndpoint{Secret: ref, Host: val("host"), Port: port, Username: val("username"), Password: string(sec.Data["password"]),
		ReplicaSet: val("replicaSet")}
	switch strings.ToLower(val("tls")) {
	case "true":
		ep.TLS = true
	case "", "false":
	default:
		o := connFail(fmt.Sprintf("Secret %s: tls is %q; it must be \"true\" or \"false\"", ref, val("tls")),
			fmt.Sprintf("set the key tls of Secret %s to \"true\" when the server requires TLS, else remove it", ref))
		return nil, &o
	}
	return ep, nil
}

// connect dials, runs the handshake and checks the version.
func (s databaseSpec) connect(ctx context.Context, ep *dbEndpoint) Outcome {
	addr := ep.Addr()
	dctx, cancel := context.WithTimeout(ctx, dbDialTimeout)
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
	timedOut := dctx.Err() == context.DeadlineExceeded
	cancel()
	if err != nil {
		reason := err.Error()
		if timedOut {
			reason = fmt.Sprintf("no answer within %s", dbDialTimeout)
		}
		return connFail(fmt.Sprintf("cannot reach %s at %s (from Secret %s) from this machine: %s", s.product, addr, ep.Secret, reason),
			fmt.Sprintf("check the keys host and port of Secret %s, that the %s server runs, and that firewalls let this machine and the cluster's nodes reach %s", ep.Secret, s.product, addr),
			fromHereNote)
	}
	conn.Close()

	hctx, cancel := context.WithTimeout(ctx, dbHandshakeTimeout)
	defer cancel()
	ver, err := s.handshake(hctx, ep)
	var rse *replicaSetError
	if errors.As(err, &rse) {
		return connFail(fmt.Sprintf("Secret %s names replica set %q, but %s at %s %s", ep.Secret, ep.ReplicaSet, s.product, addr, rse.found()),
			rse.remediation(ep.Secret), fromHereNote)
	}
	if err != nil {
		he := &handshakeError{}
		if !errors.As(classifyNetError(err), &he) {
			he = &handshakeError{kind: problemProtocol, err: err}
		}
		if hctx.Err() != nil && he.kind == problemProtocol {
			return connFail(fmt.Sprintf("%s at %s accepted a connection but did not complete a handshake within %s: %v", s.product, addr, dbHandshakeTimeout, err),
				fmt.Sprintf("check that %s is a %s server (not another service or a proxy) and whether it requires TLS (key tls of Secret %s)", addr, s.product, ep.Secret),
				fromHereNote)
		}
		switch he.kind {
		case problemCredentials:
			who := ""
			if ep.Username != "" {
				who = fmt.Sprintf(" (user %s)", ep.Username)
			}
			return connFail(fmt.Sprintf("the server refused the credentials in Secret %s%s: %s at %s: %v", ep.Secret, who, s.product, addr, err),
				fmt.Sprintf("correct the keys username and password of Secret %s, or create that user on the %s server", ep.Secret, s.product),
				fromHereNote)
		case problemTLS:
			rem := fmt.Sprintf("the server at %s must present a certificate for %s that this machine trusts (and the platform's pods too); if the server does not speak TLS, remove tls: \"true\" from Secret %s", addr, ep.Host, ep.Secret)
			if !ep.TLS {
				rem = fmt.Sprintf("the server at %s seems to require TLS: set tls: \"true\" in Secret %s", addr, ep.Secret)
			}
			return connFail(fmt.Sprintf("TLS with %s at %s failed: %v", s.product, addr, err), rem, fromHereNote)
		case problemUnreachable:
			return connFail(fmt.Sprintf("cannot reach %s at %s (from Secret %s) from this machine: %v", s.product, addr, ep.Secret, err),
				fmt.Sprintf("check the keys host and port of Secret %s, that the server runs, and that firewalls let this machine and the cluster's nodes reach %s", ep.Secret, addr),
				fromHereNote)
		default:
			rem := fmt.Sprintf("check that %s is a %s server (not another service or a proxy)", addr, s.product)
			if ep.TLS {
				rem += fmt.Sprintf(" and that it speaks TLS (Secret %s sets tls: \"true\")", ep.Secret)
			} else {
				rem += fmt.Sprintf(" and whether it requires TLS (then set tls: \"true\" in Secret %s)", ep.Secret)
			}
			return connFail(fmt.Sprintf("%s handshake with %s failed: %v", s.product, addr, err), rem, fromHereNote)
		}
	}
	have, err := parseServerVersion(ver)
	if err != nil {
		return connFail(fmt.Sprintf("%s at %s reports a version onprem cannot read (%q); the supported minimum is %s", s.product, addr, ver, s.min),
			fmt.Sprintf("make sure %s is a %s server, version %s or newer", addr, s.product, s.min), fromHereNote)
	}
	want := version.Must(version.NewVersion(s.min))
	if have.LessThan(want) {
		return connFail(fmt.Sprintf("%s at %s is version %s, older than the supported minimum %s", s.product, addr, ver, s.min),
			fmt.Sprintf("upgrade the %s server to %s or newer, or let onprem run %s in the cluster (spec.databases.%s.mode: internal)", s.product, s.min, s.product, s.name),
			fromHereNote)
	}
	tlsNote := "without TLS"
	if ep.TLS {
		tlsNote = "over TLS"
	}
	o := Passed("%s %s at %s accepted the credentials in Secret %s (%s; checked from this machine, see details)", s.product, ver, addr, ep.Secret, tlsNote)
	o.Details = []string{fromHereNote}
	return o
}

var leadingVersion = regexp.MustCompile(`^v?(\d+(?:\.\d+)*)`)

// parseServerVersion reads the leading numeric version of what a server reports
// ("15.6 (Debian 15.6-0+deb12u1)", "7.0.42", "3.13.7").
func parseServerVersion(s string) (*version.Version, error) {
	m := leadingVersion.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return nil, fmt.Errorf("no version number in %q", s)
	}
	return version.NewVersion(m[1])
}
