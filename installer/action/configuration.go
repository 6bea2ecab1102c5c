package action

import (
	"context"
	"sync"
	"time"

	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// Configuration is what the verbs that work on an installation share, as
// Helm's action.Configuration is: the connection to the platform's cluster
// (made once, on first use), its installation records and their lock.
// Every verb that reaches the platform's cluster reaches it through one,
// so that a unit test can give a verb a connection over a fake clientset
// (Connected) and only the integration ring needs an API server.
//
// A Configuration is safe for concurrent use.
type Configuration struct {
	// Options says which cluster to reach. Runners and runtimes declared
	// without a kubeconfig of their own use its kubeconfig too.
	Options kube.Options

	mu      sync.Mutex
	cluster *kube.Cluster
}

// NewConfiguration is a Configuration that connects with o when a verb
// first needs the cluster.
func NewConfiguration(o kube.Options) *Configuration {
	return &Configuration{Options: o}
}

// Connected is a Configuration over a connection made elsewhere: a test's
// *kube.Cluster with a fake clientset, or one a caller already holds.
func Connected(cl *kube.Cluster) *Configuration {
	return &Configuration{Options: kube.Options{Kubeconfig: cl.Kubeconfig, Context: cl.Context}, cluster: cl}
}

// configuration is conn, or a new Configuration for o when conn is nil:
// what a verb with both a Conn and a Cluster field works with.
func configuration(conn *Configuration, o kube.Options) *Configuration {
	if conn != nil {
		return conn
	}
	return NewConfiguration(o)
}

// connect is the platform's cluster of a verb with a Conn and a Cluster
// field (see configuration).
func connect(ctx context.Context, conn *Configuration, o kube.Options) (*kube.Cluster, error) {
	return configuration(conn, o).Cluster(ctx)
}

// targetCluster is a verb's namespace (see Target) and its connected
// configuration and cluster.
func targetCluster(ctx context.Context, t Target, conn *Configuration, o kube.Options) (string, *Configuration, *kube.Cluster, error) {
	ns, err := t.namespace(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	conf := configuration(conn, o)
	cl, err := conf.Cluster(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	return ns, conf, cl, nil
}

// Cluster connects (kube.Connect) the first time it is called and returns
// that connection from then on. A failed connection is not kept: the next
// call tries again.
func (c *Configuration) Cluster(ctx context.Context) (*kube.Cluster, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cluster != nil {
		return c.cluster, nil
	}
	cl, err := kube.Connect(ctx, c.Options)
	if err != nil {
		return nil, err
	}
	c.cluster = cl
	return cl, nil
}

// Load connects and reads the installation's record in namespace (an
// empty record when there is none).
func (c *Configuration) Load(ctx context.Context, namespace string) (*kube.Cluster, *state.Store, *state.State, error) {
	cl, err := c.Cluster(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	store := state.NewStore(cl.Client, namespace)
	st, err := store.Load(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return cl, store, st, nil
}

// LoadInstalled is Load, refusing a namespace with no installed platform
// (see requireInstalled).
func (c *Configuration) LoadInstalled(ctx context.Context, namespace string) (*kube.Cluster, *state.Store, *state.State, error) {
	cl, store, st, err := c.Load(ctx, namespace)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := requireInstalled(st, namespace); err != nil {
		return nil, nil, nil, err
	}
	return cl, store, st, nil
}

// errNotInstalled is the one answer of every verb asked to work on a
// namespace where no platform is installed: a *NotInstalledError, an
// input error (exit code 2).
func errNotInstalled(namespace string) error {
	return inputErr(&NotInstalledError{Namespace: namespace})
}

// requireInstalled refuses a record that names no installed version.
func requireInstalled(st *state.State, namespace string) error {
	if st.Version == "" {
		return errNotInstalled(namespace)
	}
	return nil
}

// lockInstalled is lockAndLoad for the verbs that need an installed
// platform: with none, the lock is released and the error says so.
func (c *Configuration) lockInstalled(ctx context.Context, namespace, verb string, wait, lease time.Duration) (context.Context, *held, error) {
	ctx, h, err := c.lockAndLoad(ctx, namespace, verb, wait, lease)
	if err != nil {
		return nil, nil, err
	}
	if err := requireInstalled(h.st, namespace); err != nil {
		h.unlock()
		return nil, nil, err
	}
	return ctx, h, nil
}

// lockAndLoad connects, takes the installation's lock in namespace and
// reads its record under it (the package's lockAndLoad): the context
// returned is cancelled if the lock is lost.
func (c *Configuration) lockAndLoad(ctx context.Context, namespace, verb string, wait, lease time.Duration) (context.Context, *held, error) {
	cl, err := c.Cluster(ctx)
	if err != nil {
		return nil, nil, err
	}
	return lockAndLoad(ctx, cl, namespace, verb, wait, lease)
}
