package gitops

import (
	"context"
	"fmt"

	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/configrepo"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// DesignateResult is the configuration runtime before and after.
type DesignateResult struct {
	Previous         string `json:"previous"`
	ConfigRuntime    string `json:"configRuntime"`
	RepositoryCommit string `json:"repositoryCommit,omitempty"`
	// Next is the command that tells the runtimes' charts of the change
	// (their configuration-runtime value), when the designation moved.
	Next string `json:"next,omitempty"`
}

// Designate makes name the configuration runtime: the designation in the
// configuration repository (resources/configuration) is moved with a
// commit, then recorded. cl is name's cluster: the Git token is read from
// there (the operator need not give it again).
func Designate(ctx context.Context, p *Platform, name string, cl *kube.Cluster, o Options) (*DesignateResult, error) {
	rec, ok := p.State.Runtimes[name]
	if !ok {
		return nil, NotFound(p.State, name)
	}
	rc := p.State.RuntimeConfig
	if rc == nil || rc.URL == "" {
		return nil, fmt.Errorf("runtime %s: the installation records no configuration repository: run 'onprem runtime upgrade %s' to record it", name, name)
	}
	if cl.Server != rec.Server {
		return nil, &attachment.ConflictError{Msg: fmt.Sprintf("runtime %s runs on the cluster at %s, but the cluster given reaches %s", name, rec.Server, cl.Server)}
	}
	token, err := readToken(ctx, cl, rec.Namespace)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", name, err)
	}
	if token == nil {
		return nil, fmt.Errorf("runtime %s: its Git token (Secret %s) is missing: reinstall it with 'onprem runtime upgrade %s --git-token-file FILE'", name, rec.Namespace, name)
	}
	defer clear(token)
	out := &DesignateResult{Previous: rc.ConfigRuntime}
	gr, err := configrepo.Designate(ctx, remote(config.GitRepository{URL: rc.URL, Branch: rc.Branch, Path: rc.Path}, token, o), name)
	if err != nil {
		return out, fmt.Errorf("runtime %s: configuration repository: %w", name, err)
	}
	if gr.Pushed {
		out.RepositoryCommit = gr.Commit
	}
	out.ConfigRuntime = name
	if out.Previous != name {
		names := name
		if _, ok := p.State.Runtimes[out.Previous]; ok && out.Previous != "" {
			names = out.Previous + " " + name
		}
		out.Next = "onprem runtime upgrade " + names + " -c onprem.yaml"
	}
	next := *rc
	next.ConfigRuntime = name
	p.State.RuntimeConfig = &next
	if err := p.Store.Save(ctx, p.State); err != nil {
		p.State.RuntimeConfig = rc
		return out, fmt.Errorf("runtime %s: recording the designation: %w", name, err)
	}
	return out, nil
}

// ConfigRuntime is the recorded configuration runtime ("" when none).
func ConfigRuntime(st *state.State) string {
	if st.RuntimeConfig == nil {
		return ""
	}
	return st.RuntimeConfig.ConfigRuntime
}
