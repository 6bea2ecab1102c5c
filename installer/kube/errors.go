package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Reason says why Connect failed.
type Reason string

// Reasons of an *UnreachableError.
const (
	ReasonNoKubeconfig      Reason = "NoKubeconfig"      // no kubeconfig anywhere and not in a cluster
	ReasonKubeconfigMissing Reason = "KubeconfigMissing" // the explicit kubeconfig file does not exist
	ReasonConfigInvalid     Reason = "ConfigInvalid"     // the kubeconfig cannot be read or is incomplete
	ReasonNoContext         Reason = "NoContext"         // no --context and no current-context
	ReasonContextNotFound   Reason = "ContextNotFound"   // the context is not in the kubeconfig
	ReasonRefused           Reason = "ConnectionRefused" // nothing listens at the server's address
	ReasonDNS               Reason = "DNS"               // the server's host name does not resolve
	ReasonTimeout           Reason = "Timeout"           // no answer within the timeout
	ReasonNetwork           Reason = "Network"           // another network error
	ReasonBadResponse       Reason = "BadResponse"       // something answered, but not a healthy Kubernetes API server
)

// Reasons of an *AuthError.
const (
	ReasonTLS          Reason = "TLS"          // the server's certificate is not trusted, or the TLS handshake was refused
	ReasonUnauthorized Reason = "Unauthorized" // 401: the credentials were rejected
	ReasonForbidden    Reason = "Forbidden"    // 403: the user may not even read /version
	ReasonCredentials  Reason = "Credentials"  // the credentials could not be obtained (exec plugin)
)

// UnreachableError says that onprem could not talk to a Kubernetes API
// server: the kubeconfig or context is missing or wrong, or the server did
// not answer. The command line exits with ExitCode.
type UnreachableError struct {
	Kubeconfig string // kubeconfig file(s) used; "" for in-cluster or when none was found
	Context    string
	Server     string
	Reason     Reason
	// Contexts are the contexts the kubeconfig has (ReasonContextNotFound,
	// ReasonNoContext).
	Contexts []string
	Timeout  time.Duration // ReasonTimeout
	Err      error

	detail error // extra cause shown in the message (the in-cluster error)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

func (e *UnreachableError) Error() string {
	var b strings.Builder
	switch e.Reason {
	case ReasonNoKubeconfig:
		b.WriteString("cannot connect to a Kubernetes cluster: ")
		b.WriteString(e.Err.Error())
		if e.Context != "" {
			fmt.Fprintf(&b, " (context %q was asked for)", e.Context)
		}
		if e.detail != nil {
			fmt.Fprintf(&b, " (in-cluster: %v)", e.detail)
		}
		b.WriteString("; pass --kubeconfig, set KUBECONFIG, or create ~/.kube/config")
	case ReasonKubeconfigMissing:
		fmt.Fprintf(&b, "cannot connect to the Kubernetes cluster: kubeconfig file %s does not exist; check the --kubeconfig path", e.Kubeconfig)
	case ReasonConfigInvalid:
		fmt.Fprintf(&b, "cannot connect to the Kubernetes cluster: the kubeconfig is not usable (%s): %v; check it with: %s",
			where(e.Kubeconfig, e.Context, e.Server), e.Err, kubectlView(e.Kubeconfig, e.Context))
	case ReasonNoContext:
		fmt.Fprintf(&b, "cannot connect to the Kubernetes cluster: kubeconfig %s has no current-context; pass --context with %s",
			e.Kubeconfig, contextList(e.Contexts))
	case ReasonContextNotFound:
		fmt.Fprintf(&b, "cannot connect to the Kubernetes cluster: context %q is not in kubeconfig %s; ", e.Context, e.Kubeconfig)
		if len(e.Contexts) == 0 {
			b.WriteString("it has no contexts at all")
		} else {
			fmt.Fprintf(&b, "it has: %s; pass --context with one of them", strings.Join(e.Contexts, ", "))
		}
	case ReasonRefused:
		fmt.Fprintf(&b, "cannot connect to the Kubernetes API server (%s): connection refused; check that the cluster is running and that %s is its address",
			where(e.Kubeconfig, e.Context, e.Server), serverOr(e.Server))
	case ReasonDNS:
		fmt.Fprintf(&b, "cannot connect to the Kubernetes API server (%s): %v; check the server URL in the kubeconfig and this machine's DNS",
			where(e.Kubeconfig, e.Context, e.Server), e.Err)
	case ReasonTimeout:
		fmt.Fprintf(&b, "the Kubernetes API server did not answer within %s (%s); check that the cluster is up and that this machine can reach %s (VPN, firewall, proxy)",
			e.Timeout, where(e.Kubeconfig, e.Context, e.Server), serverOr(e.Server))
	case ReasonBadResponse:
		fmt.Fprintf(&b, "the server did not answer like a healthy Kubernetes API server (%s): %v; check the server URL in the kubeconfig and the API server's health",
			where(e.Kubeconfig, e.Context, e.Server), e.Err)
	default:
		fmt.Fprintf(&b, "cannot connect to the Kubernetes API server (%s): %v; check that the cluster is running and reachable from this machine",
			where(e.Kubeconfig, e.Context, e.Server), e.Err)
	}
	return b.String()
}

// AuthError says that a server answered but it and onprem did not accept
// each other: an untrusted server certificate, rejected or unobtainable
// credentials. The command line exits with ExitCode.
type AuthError struct {
	Kubeconfig string
	Context    string
	Server     string
	Reason     Reason // ReasonTLS, ReasonUnauthorized, ReasonForbidden, ReasonCredentials
	Err        error
}

func (e *AuthError) Unwrap() error { return e.Err }

func (e *AuthError) Error() string {
	w := where(e.Kubeconfig, e.Context, e.Server)
	switch e.Reason {
	case ReasonTLS:
		return fmt.Sprintf("cannot connect securely to the Kubernetes API server (%s): %v; check the certificate-authority of the cluster and the client certificate of the user in the kubeconfig, and that %s is the cluster you mean",
			w, e.Err, serverOr(e.Server))
	case ReasonUnauthorized:
		return fmt.Sprintf("the Kubernetes API server rejected the credentials (%s): 401 Unauthorized; the token or client certificate of the kubeconfig's user is wrong or expired: refresh it", w)
	case ReasonForbidden:
		return fmt.Sprintf("the Kubernetes API server refused access to /version (%s): 403 Forbidden: %v; the kubeconfig's user is not allowed to use this cluster", w, e.Err)
	case ReasonCredentials:
		return fmt.Sprintf("cannot get credentials for the Kubernetes cluster (%s): %v; check the user of the context in the kubeconfig (is its credential plugin installed and logged in?)", w, e.Err)
	default:
		return fmt.Sprintf("the Kubernetes API server refused the connection (%s): %v", w, e.Err)
	}
}

// IsConnectError reports whether err (or an error it wraps) is an
// *UnreachableError or an *AuthError: the command line exits with ExitCode.
func IsConnectError(err error) bool {
	var u *UnreachableError
	var a *AuthError
	return errors.As(err, &u) || errors.As(err, &a)
}

// classify turns the error of the /version call into an *UnreachableError
// or an *AuthError.
func classify(err error, kubeconfig, kctx, server string, timeout time.Duration) error {
	unreachable := func(r Reason) error {
		return &UnreachableError{Kubeconfig: kubeconfig, Context: kctx, Server: server, Reason: r, Timeout: timeout, Err: err}
	}
	auth := func(r Reason) error {
		return &AuthError{Kubeconfig: kubeconfig, Context: kctx, Server: server, Reason: r, Err: err}
	}

	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch status.Status().Code {
		case http.StatusUnauthorized:
			return auth(ReasonUnauthorized)
		case http.StatusForbidden:
			return auth(ReasonForbidden)
		}
		return unreachable(ReasonBadResponse)
	}
	var bad *badResponseError
	if errors.As(err, &bad) {
		return unreachable(ReasonBadResponse)
	}
	msg := err.Error()
	if strings.Contains(msg, "getting credentials") {
		// client-go's exec credential plugin (and the auth providers) say so.
		return auth(ReasonCredentials)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return unreachable(ReasonTimeout)
	}
	var (
		verify    *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		alert     tls.AlertError
	)
	if errors.As(err, &verify) || errors.As(err, &unknownCA) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &alert) {
		return auth(ReasonTLS)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		// A TLS alert from the server: it refused our client certificate.
		return auth(ReasonTLS)
	}
	if strings.Contains(msg, "server gave HTTP response to HTTPS client") {
		return unreachable(ReasonBadResponse)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return unreachable(ReasonDNS)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return unreachable(ReasonRefused)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return unreachable(ReasonTimeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() {
		return unreachable(ReasonTimeout)
	}
	return unreachable(ReasonNetwork)
}

func where(kubeconfig, kctx, server string) string {
	var parts []string
	if kubeconfig == "" && kctx == "" {
		parts = append(parts, "in-cluster service account")
	} else {
		if kubeconfig != "" {
			parts = append(parts, "kubeconfig "+kubeconfig)
		}
		if kctx != "" {
			parts = append(parts, fmt.Sprintf("context %q", kctx))
		}
	}
	if server != "" {
		parts = append(parts, "server "+server)
	}
	return strings.Join(parts, ", ")
}

func serverOr(server string) string {
	if server == "" {
		return "the server"
	}
	return server
}

// kubectlView is the kubectl command that shows the same configuration.
func kubectlView(kubeconfig, kctx string) string {
	s := "kubectl config view"
	if strings.ContainsRune(kubeconfig, os.PathListSeparator) {
		s = "KUBECONFIG=" + kubeconfig + " " + s
	} else if kubeconfig != "" {
		s += " --kubeconfig " + kubeconfig
	}
	if kctx != "" {
		s += " --context " + kctx + " --minify"
	}
	return s
}

func contextList(names []string) string {
	if len(names) == 0 {
		return "a context (it has none)"
	}
	return "one of: " + strings.Join(names, ", ")
}
