package kube

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// getter is the genericclioptions.RESTClientGetter handed to the Helm SDK.
// Unlike genericclioptions.ConfigFlags it does not re-read the kubeconfig:
// it serves the configuration Connect resolved and verified (same context,
// same QPS/Burst), and it caches discovery in memory, not under
// ~/.kube/cache. The discovery client and the REST mapper are made once and
// shared, so that invalidating one (after CRDs are installed) is seen by
// every user.
type getter struct {
	config *rest.Config
	loader clientcmd.ClientConfig

	once      sync.Once
	discovery discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
	err       error
}

var _ genericclioptions.RESTClientGetter = (*getter)(nil)

func newGetter(cfg *rest.Config, loader clientcmd.ClientConfig) *getter {
	return &getter{config: cfg, loader: loader}
}

// ToRESTConfig returns a copy of the verified configuration.
func (g *getter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.config), nil }

// ToRawKubeConfigLoader returns the resolved kubeconfig and context (the
// Helm SDK reads the context's default namespace from it).
func (g *getter) ToRawKubeConfigLoader() clientcmd.ClientConfig { return g.loader }

// ToDiscoveryClient returns the shared, memory-cached discovery client.
func (g *getter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	g.init()
	return g.discovery, g.err
}

// ToRESTMapper returns the shared, discovery-backed REST mapper (with
// kubectl's short names).
func (g *getter) ToRESTMapper() (meta.RESTMapper, error) {
	g.init()
	return g.mapper, g.err
}

func (g *getter) init() {
	g.once.Do(func() {
		cfg := rest.CopyConfig(g.config)
		cfg.Burst = discoveryBurst
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			g.err = err
			return
		}
		g.discovery = memory.NewMemCacheClient(dc)
		g.mapper = restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(g.discovery), g.discovery, nil)
	})
}
