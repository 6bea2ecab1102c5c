// Package kube connects onprem to a Kubernetes cluster the way kubectl does
// and proves the connection before anything is touched.
//
// Connect resolves the kubeconfig (an explicit path, else the files listed
// in $KUBECONFIG, else ~/.kube/config, else the in-cluster service account)
// and the context (an explicit name, else the kubeconfig's current-context),
// then calls the API server's /version endpoint within Options.Timeout. It
// returns a Cluster only when the server answered; otherwise it returns one
// of two errors, both naming the kubeconfig, the context and the server:
//
//   - *UnreachableError: onprem could not talk to a Kubernetes API server at
//     all: no kubeconfig, a missing or invalid kubeconfig file, a context the
//     kubeconfig does not have (the error lists the ones it has), a refused
//     connection, a DNS failure, a timeout, or an answer that is not a
//     Kubernetes API server's.
//   - *AuthError: a server answered but the two sides did not accept each
//     other: its certificate is not trusted (or the server URL does not match
//     it), the client credentials were rejected (401/403 on /version, or a
//     TLS alert about the client certificate), or the credentials could not
//     be obtained (an exec plugin failed).
//
// The command line maps both to exit code 3 (ExitCode); nothing has been
// changed on the cluster when either is returned, because Connect only reads.
//
// The Cluster carries a rest.Config with QPS and Burst raised for an
// installer (DefaultQPS, DefaultBurst), a clientset, and a
// genericclioptions.RESTClientGetter for the Helm SDK that reuses the same
// configuration (same context, same limits, in-memory discovery cache: no
// ~/.kube/cache is written).
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	onpremversion "onprem.dev/onprem/installer/version"
)

// ExitCode is the exit code of the command line when Connect fails with an
// *UnreachableError or an *AuthError.
const ExitCode = 3

// DefaultTimeout bounds Connect's check of the API server.
const DefaultTimeout = 15 * time.Second

// Client-side rate limits of the returned configuration. client-go's
// defaults (5/10) are made for controllers sharing a cluster with many
// others; an installer applies hundreds of objects in a short burst and then
// waits, so it may ask more.
const (
	DefaultQPS   = 50
	DefaultBurst = 100
	// discoveryBurst lets the Helm SDK's discovery fetch every API group at
	// once, as kubectl does.
	discoveryBurst = 300
)

// Options says which cluster to connect to.
type Options struct {
	// Kubeconfig is an explicit kubeconfig path (--kubeconfig). It must
	// exist. Empty: $KUBECONFIG, ~/.kube/config, in-cluster, in that order.
	Kubeconfig string
	// Context is the kubeconfig context to use (--context). Empty: the
	// kubeconfig's current-context.
	Context string
	// Timeout bounds the check of the API server; DefaultTimeout when zero.
	Timeout time.Duration
}

// Cluster is a verified connection to one cluster.
type Cluster struct {
	// Config is the client configuration (QPS/Burst raised, user agent set).
	Config *rest.Config
	// Client is a clientset made from Config.
	Client kubernetes.Interface
	// Getter serves the same configuration to the Helm SDK
	// (action.Configuration.Init).
	Getter genericclioptions.RESTClientGetter
	// Kubeconfig is the kubeconfig file actually used, or the files merged
	// from $KUBECONFIG joined by the OS list separator; "" for in-cluster.
	Kubeconfig string
	// Context is the context used; "" for in-cluster.
	Context string
	// Server is the API server's URL.
	Server string
	// ServerVersion is the server's git version, e.g. v1.36.3.
	ServerVersion string
	// Info is the server's full /version answer.
	Info version.Info
}

// Seams for tests.
var (
	inClusterConfig = rest.InClusterConfig
	homeKubeconfig  = func() string { return clientcmd.RecommendedHomeFile }
)

// Connect resolves the kubeconfig and context, builds the client and checks
// that the API server answers /version within o.Timeout. See the package
// documentation for the errors it returns.
func Connect(ctx context.Context, o Options) (*Cluster, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	cfg, loader, c, err := resolve(o)
	if err != nil {
		return nil, err
	}
	configure(cfg)
	c.Config = cfg
	c.Server = cfg.Host

	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, &UnreachableError{Kubeconfig: c.Kubeconfig, Context: c.Context, Server: c.Server,
			Reason: ReasonConfigInvalid, Err: err}
	}
	c.Client = client

	info, err := serverVersion(ctx, client, o.Timeout)
	if err != nil {
		if ctx.Err() != nil {
			// The caller gave up (Ctrl-C): not a fact about the cluster.
			return nil, ctx.Err()
		}
		return nil, classify(err, c.Kubeconfig, c.Context, c.Server, o.Timeout)
	}
	c.Info = *info
	c.ServerVersion = info.GitVersion
	c.Getter = newGetter(cfg, loader)
	return c, nil
}

// resolve finds the configuration like kubectl does and returns it with the
// clientcmd.ClientConfig it came from (for the Helm getter's namespace).
func resolve(o Options) (*rest.Config, clientcmd.ClientConfig, *Cluster, error) {
	files, fromEnv, err := kubeconfigFiles(o.Kubeconfig)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(files) == 0 {
		// No kubeconfig anywhere: in-cluster, unless a context was asked for.
		var inErr error
		if o.Context == "" {
			cfg, err := inClusterConfig()
			if err == nil {
				loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
					&clientcmd.ClientConfigLoadingRules{}, &clientcmd.ConfigOverrides{})
				return cfg, loader, &Cluster{}, nil
			}
			inErr = err
		}
		where := "~/.kube/config"
		if fromEnv != "" {
			where = "$KUBECONFIG (" + fromEnv + ")"
		}
		return nil, nil, nil, &UnreachableError{Context: o.Context, Reason: ReasonNoKubeconfig,
			Err: fmt.Errorf("no kubeconfig found in %s and not running inside a cluster", where), detail: inErr}
	}

	joined := strings.Join(files, string(os.PathListSeparator))
	rules := &clientcmd.ClientConfigLoadingRules{Precedence: files}
	raw, err := rules.Load()
	if err != nil {
		return nil, nil, nil, &UnreachableError{Kubeconfig: joined, Context: o.Context,
			Reason: ReasonConfigInvalid, Err: err}
	}
	contexts := contextNames(raw)
	name := o.Context
	if name == "" {
		name = raw.CurrentContext
		if name == "" {
			return nil, nil, nil, &UnreachableError{Kubeconfig: joined, Reason: ReasonNoContext, Contexts: contexts,
				Err: errors.New("the kubeconfig has no current-context")}
		}
	}
	kctx, ok := raw.Contexts[name]
	if !ok {
		return nil, nil, nil, &UnreachableError{Kubeconfig: joined, Context: name, Reason: ReasonContextNotFound,
			Contexts: contexts, Err: fmt.Errorf("context %q is not in the kubeconfig", name)}
	}
	server := ""
	if cl, ok := raw.Clusters[kctx.Cluster]; ok {
		server = cl.Server
	}
	loader := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, rules)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, nil, nil, &UnreachableError{Kubeconfig: joined, Context: name, Server: server,
			Reason: ReasonConfigInvalid, Err: err}
	}
	return cfg, loader, &Cluster{Kubeconfig: joined, Context: name}, nil
}

// kubeconfigFiles returns the existing kubeconfig files to merge, in
// precedence order, and the value of $KUBECONFIG when it was consulted.
func kubeconfigFiles(explicit string) (files []string, env string, err error) {
	if explicit != "" {
		st, err := os.Stat(explicit)
		switch {
		case err != nil:
			reason := ReasonConfigInvalid
			if errors.Is(err, os.ErrNotExist) {
				reason = ReasonKubeconfigMissing
				err = fmt.Errorf("kubeconfig file %s does not exist", explicit)
			}
			return nil, "", &UnreachableError{Kubeconfig: explicit, Reason: reason, Err: err}
		case st.IsDir():
			return nil, "", &UnreachableError{Kubeconfig: explicit, Reason: ReasonConfigInvalid,
				Err: fmt.Errorf("kubeconfig %s is a directory, not a file", explicit)}
		}
		return []string{explicit}, "", nil
	}
	if env = os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		// Like kubectl: files of the list that do not exist are ignored.
		for _, p := range filepath.SplitList(env) {
			if p == "" || slices.Contains(files, p) {
				continue
			}
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				files = append(files, p)
			}
		}
		return files, env, nil
	}
	if home := homeKubeconfig(); home != "" {
		if st, err := os.Stat(home); err == nil && !st.IsDir() {
			return []string{home}, "", nil
		}
	}
	return nil, "", nil
}

func contextNames(c *clientcmdapi.Config) []string {
	names := make([]string, 0, len(c.Contexts))
	for n := range c.Contexts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// configure sets onprem's client limits and user agent on cfg.
func configure(cfg *rest.Config) {
	if cfg.QPS < DefaultQPS {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst < DefaultBurst {
		cfg.Burst = DefaultBurst
	}
	cfg.UserAgent = "onprem/" + onpremversion.Version + " " + rest.DefaultKubernetesUserAgent()
	cfg.WarningHandler = apiWarnings{}
}

// apiWarnings sends the API server's warnings to the log (slog), where
// client-go would print them on stderr, in the middle of a command's
// output. One it never logs: that Endpoints are deprecated, which every
// read of Patroni's leader lock (installer/topology) draws, and which
// says nothing an operator can act on.
type apiWarnings struct{}

func (apiWarnings) HandleWarningHeader(code int, agent, text string) {
	if code != 299 || text == "" || strings.HasPrefix(text, "v1 Endpoints is deprecated") {
		return
	}
	slog.Warn("Kubernetes API warning", "warning", text)
}

// serverVersion GETs /version, bounded by timeout.
func serverVersion(ctx context.Context, client kubernetes.Interface, timeout time.Duration) (*version.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil || info.GitVersion == "" {
		return nil, &badResponseError{body: body}
	}
	return &info, nil
}

type badResponseError struct{ body []byte }

func (e *badResponseError) Error() string {
	b := strings.TrimSpace(string(e.body))
	if len(b) > 200 {
		b = b[:200] + "..."
	}
	return fmt.Sprintf("/version did not answer a Kubernetes version (got %q)", b)
}
