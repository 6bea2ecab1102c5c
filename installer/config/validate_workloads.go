package config

import (
	"errors"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Validation of build runners and GitOps runtimes.

// clusterKey identifies a cluster by how onprem reaches it; the zero key is
// the platform's own cluster.
type clusterKey ClusterRef

func (k clusterKey) String() string {
	if ClusterRef(k).IsPlatformCluster() {
		return "the platform's cluster"
	}
	return sprintf("the cluster of kubeconfig %q, context %q", k.Kubeconfig, k.Context)
}

func (v *validator) runners(s *Spec) {
	names := map[string]int{}
	type place struct {
		cluster   clusterKey
		namespace string
	}
	places := map[place]int{}
	for i, r := range s.Runners {
		path := indexPath("spec.runners", i)
		nameOK := v.unique(path+".name", ValidateRunnerName(path+".name", r.Name), "runner", r.Name, names, i, "spec.runners", "runner names must be unique")
		// A duplicate name already explains a duplicate default namespace.
		if r.Namespace != "" && (nameOK || r.Namespace != RunnerNamespacePrefix+r.Name) {
			if err := ValidateRunnerNamespace(path+".namespace", r.Namespace, r.Name); err != nil {
				v.rule(err)
			} else {
				p := place{clusterKey(r.Cluster), r.Namespace}
				if first, dup := places[p]; dup {
					v.c.add(path+".namespace", "", "spec.runners[%d] already runs in namespace %q on %s: give each runner its own namespace", first, r.Namespace, p.cluster)
				} else {
					places[p] = i
				}
			}
		}
		v.rule(ValidateRunnerConcurrency(path+".concurrency", r.Concurrency))
	}
}

func (v *validator) runtimes(s *Spec) {
	names := map[string]int{}
	clusters := map[clusterKey]int{}
	for i, rt := range s.Runtimes {
		path := indexPath("spec.runtimes", i)
		v.unique(path+".name", ValidateRuntimeName(path+".name", rt.Name), "runtime", rt.Name, names, i, "spec.runtimes", "runtime names must be unique")
		if rt.Namespace != "" {
			v.rule(ValidateRuntimeNamespace(path+".namespace", rt.Namespace, rt.Name))
		}

		key := clusterKey(rt.Cluster)
		if first, dup := clusters[key]; dup {
			v.c.add(path+".cluster", "set cluster.kubeconfig or cluster.context to another cluster",
				"spec.runtimes[%d] already runs on %s: one runtime per cluster", first, key)
		} else {
			clusters[key] = i
		}

		v.gitToken(path+".gitToken", rt.GitToken)
		v.runtimeAccess(path+".access", rt.Access)
		v.gitSources(path, rt.GitSources)
		v.managedClusters(path, rt.ManagedClusters)
	}
}

// rule records the problem that a rule of workloads.go returned (a
// FieldError), if any.
func (v *validator) rule(err error) {
	if fe, ok := err.(FieldError); ok {
		v.c.add(fe.Path, fe.Hint, "%s", fe.Message)
	}
}

func (v *validator) gitToken(path string, t SecretSource) {
	v.secretSource(path, t, "the runtime's Git token")
}

func (v *validator) secretSource(path string, t SecretSource, what string) {
	switch {
	case t.File != "" && t.Env != "":
		v.c.add(path, "", "set either file or env, not both")
	case t.File == "" && t.Env == "":
		v.required(path, "where "+what+" is read from: file (a file holding it) or env (an environment variable holding it)")
	case t.Env != "":
		v.check(path+".env", checkEnvName(t.Env), "")
	}
}

func (v *validator) runtimeAccess(path string, a RuntimeAccess) {
	switch a.Mode {
	case "", RuntimeAccessIngress:
		if a.URL != "" {
			v.c.add(path+".url", "set mode: url, or remove url", "only used with mode url")
		}
	case RuntimeAccessTunnel:
		if a.URL != "" || a.Host != "" || a.ClassName != "" {
			v.c.add(path, "remove host, className and url, or use mode ingress or url", "mode tunnel has no Ingress and no URL")
		}
		v.tunnelServer(path+".tunnelServer", a.TunnelServer)
	case RuntimeAccessURL:
		if a.URL == "" {
			v.required(path+".url", "the https URL the platform reaches the runtime at, e.g. https://edge.example.com")
		} else {
			msg, hint := checkHTTPURL(a.URL, "https", "https://edge.example.com")
			v.check(path+".url", msg, hint)
		}
		if a.Host != "" || a.ClassName != "" {
			v.c.add(path, "remove host and className, or use mode ingress", "mode url has no Ingress")
		}
	}
	if a.Mode != RuntimeAccessTunnel && a.TunnelServer != (TunnelServer{}) {
		v.c.add(path+".tunnelServer", "set mode: tunnel, or remove tunnelServer", "only used with mode tunnel")
	}
	// Any other mode: the enum check names it.
	if a.Host != "" {
		if msgs := validation.IsDNS1123Subdomain(a.Host); len(msgs) > 0 {
			v.c.add(path+".host", "", "%q is not a host name: %s", a.Host, strings.Join(msgs, "; "))
		}
	}
}

func (v *validator) gitSources(runtimePath string, sources []GitSource) {
	names := map[string]int{}
	for j, gs := range sources {
		path := indexPath(runtimePath+".gitSources", j)
		v.uniqueLabel(path+".name", gs.Name, "git source", names, j, runtimePath+".gitSources")
		v.gitURL(path+".repository.url", gs.Repository.URL)
	}
}

func (v *validator) managedClusters(runtimePath string, clusters []ManagedCluster) {
	names := map[string]int{}
	for j, mc := range clusters {
		path := indexPath(runtimePath+".managedClusters", j)
		v.uniqueLabel(path+".name", mc.Name, "managed cluster", names, j, runtimePath+".managedClusters")
		if mc.Cluster.IsPlatformCluster() {
			v.required(path+".cluster", "how onprem reaches the cluster: set context and/or kubeconfig")
		}
	}
}

// uniqueLabel checks a required name that is a DNS label unique in its list.
func (v *validator) uniqueLabel(path, name, what string, seen map[string]int, i int, list string) {
	err := fieldError(path, "", checkDNSLabel(name))
	if name == "" {
		err = fieldError(path, "", "required: a unique name for the "+what+" (a DNS label)")
	}
	v.unique(path, err, what, name, seen, i, list, "names must be unique")
}

// unique records err, the problem a name's rule found, or else a name that
// an earlier item of list already has (seen maps names to their index,
// must says why they may not repeat); it says whether the name is good
// and new.
func (v *validator) unique(path string, err error, what, name string, seen map[string]int, i int, list, must string) bool {
	if err != nil {
		v.rule(err)
		return false
	}
	if first, dup := seen[name]; dup {
		v.c.add(path, "", "duplicate %s name %q (also %s): %s", what, name, indexPath(list, first), must)
		return false
	}
	seen[name] = i
	return true
}

func (v *validator) gitURL(path, url string) {
	if url == "" {
		v.required(path, "the repository's clone URL, e.g. https://git.example.com/platform/gitops.git")
		return
	}
	msg, hint := checkHTTPURL(url, "https", "https://git.example.com/platform/gitops.git")
	v.check(path, msg, hint)
}

func (v *validator) runtimeConfig(s *Spec) {
	rc := s.RuntimeConfig
	const path = "spec.runtimeConfig"
	if len(s.Runtimes) == 0 {
		// Runtimes installed with 'onprem runtime install' share this
		// repository too: it may be given alone.
		if rc.Repository != (GitRepository{}) {
			v.gitURL(path+".repository.url", rc.Repository.URL)
		} else if rc.ConfigRuntime != "" {
			v.c.add(path+".configRuntime", "", "set but there is no repository: set spec.runtimeConfig.repository.url, or remove configRuntime")
		}
		if rc.ConfigRuntime != "" {
			v.check(path+".configRuntime", checkDNSLabel(rc.ConfigRuntime), "")
		}
		if rc.PlatformToken != (SecretSource{}) {
			v.secretSource(path+".platformToken", rc.PlatformToken, "the platform token the runtimes register with")
		}
		return
	}
	v.gitURL(path+".repository.url", rc.Repository.URL)
	if rc.AccountID == "" {
		v.required(path+".accountId", "the platform account the runtimes register with (its ID, from the platform's account settings)")
	}
	v.secretSource(path+".platformToken", rc.PlatformToken, "the platform token the runtimes register with")

	var names []string
	for _, rt := range s.Runtimes {
		if rt.Name != "" {
			names = append(names, rt.Name)
		}
	}
	switch {
	case rc.ConfigRuntime == "":
		if len(names) == len(s.Runtimes) {
			v.required(path+".configRuntime", "the runtime that holds the configuration (valid: "+quoteList(names)+")")
		}
	case !slices.Contains(names, rc.ConfigRuntime):
		v.c.add(path+".configRuntime", didYouMean(rc.ConfigRuntime, names),
			"%q is not one of the runtimes (valid: %s)", rc.ConfigRuntime, quoteList(names))
	}
}

// tunnelServer checks the tunnel server of a runtime in mode tunnel (see
// ValidateTunnelServer).
func (v *validator) tunnelServer(path string, t TunnelServer) {
	var es Errors
	if errors.As(ValidateTunnelServer(path, t), &es) {
		for _, e := range es {
			v.rule(e)
		}
	}
}
