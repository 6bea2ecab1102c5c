package action

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/diff"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/preflight"
)

// Diff shows what `install` would change: per component, a unified diff of
// live against desired objects, with secret values redacted.
type Diff struct {
	Source
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
	Set  []string
}

// DiffResult lists the components that would change.
type DiffResult struct {
	Namespace  string           `json:"namespace"`
	Version    string           `json:"version"`
	Components []diff.Component `json:"components"`
	// Moves are the databases install would move between a single server
	// and a replicated cluster (spec.availability changed): their
	// StatefulSets are made again and their data restored
	// (docs/availability.md).
	Moves []string `json:"availabilityMoves,omitempty"`
}

// Run diffs; it changes nothing.
func (d *Diff) Run(ctx context.Context) (*DiffResult, error) {
	l, err := d.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	res, err := render.Render(ctx, l.RenderOptions(d.Set))
	if err != nil {
		if render.IsInputError(err) {
			return nil, inputErr(err)
		}
		return nil, err
	}
	cl, err := connect(ctx, d.Conn, d.Cluster)
	if err != nil {
		return nil, err
	}
	changes, err := preflight.AvailabilityChanges(ctx, cl.Client, res.Namespace, l.Installation)
	if err != nil {
		return nil, err
	}
	replaced := map[string]bool{}
	out := &DiffResult{Namespace: res.Namespace, Version: res.Version}
	for _, c := range changes {
		out.Moves = append(out.Moves, c.String())
		// The move deletes the database's StatefulSet, volumes and Service
		// (whose Endpoints would otherwise outlive the form) and makes
		// them again.
		replaced["StatefulSet/"+c.Engine] = true
		replaced["Service/"+c.Engine] = true
	}
	if out.Components, err = liveDiff(ctx, cl, res, replaced); err != nil {
		return nil, err
	}
	return out, nil
}

// liveDiff diffs a rendered platform against the cluster, with the
// generated secrets' values redacted.
func liveDiff(ctx context.Context, cl *kube.Cluster, res *render.Result, replaced map[string]bool) ([]diff.Component, error) {
	dyn, err := dynamic.NewForConfig(cl.Config)
	if err != nil {
		return nil, err
	}
	mapper, err := cl.Getter.ToRESTMapper()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range res.Secrets {
		names = append(names, s.Name)
	}
	values, err := secrets.Values(ctx, cl.Client, res.Namespace, names)
	if err != nil {
		return nil, fmt.Errorf("reading generated secrets to redact them: %w", err)
	}
	releases := apply.NewHelmReleases(cl.Getter, res.Namespace, nil)
	return diff.Run(ctx, diff.Options{
		Dynamic: dyn, Mapper: mapper, Result: res, Manifest: releases.Manifest,
		Redact:   func(s string) string { return secrets.Redact(s, values...) },
		Replaced: replaced,
	})
}
