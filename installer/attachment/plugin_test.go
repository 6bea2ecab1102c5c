package attachment

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
)

// cacheRecord is the record of a third, made-up kind of attachment: a
// build cache beside the platform. Adding it takes its record, its words
// and its rules; the cluster, the errors, the listing and the status are
// this package's.
type cacheRecord struct{ Server, Context, Namespace, Release string }

type caches map[string]cacheRecord

func (c caches) attachment(name string) Attachment {
	rec := c[name]
	return Attachment{Kind: "cache", Name: name, Label: "onprem.dev/cache", Release: rec.Release, Namespaces: []string{rec.Namespace}}
}

func (c caches) notFound(name string) error {
	return &NotFoundError{Kind: "cache", Recorded: "installed in", Name: name, Known: Names(c)}
}

// checkPlace is the kind's own rule: one cache per namespace.
func (c caches) checkPlace(name, server, namespace string) error {
	for _, other := range Names(c) {
		if rec := c[other]; other != name && rec.Server == server && rec.Namespace == namespace {
			p := Place{Server: rec.Server, Context: rec.Context, Namespace: rec.Namespace}
			return &ConflictError{Msg: fmt.Sprintf("cache %s: %s is cache %s's", name, p.Where(), other)}
		}
	}
	return nil
}

func TestAThirdKindIsAPlugIn(t *testing.T) {
	c := caches{"b": {Server: "https://p", Namespace: "cache-b", Release: "cache-b"}, "a": {Server: "https://p", Context: "edge", Namespace: "cache-a", Release: "cache-a"}}
	var nf *NotFoundError
	if err := c.notFound("z"); !errors.As(err, &nf) || err.Error() != `no cache "z" is installed in this installation; its caches: a, b` {
		t.Errorf("not found: %v", err)
	}
	var ce *ConflictError
	if err := c.checkPlace("n", "https://p", "cache-a"); !errors.As(err, &ce) || err.Error() != `cache n: the cluster at https://p (context "edge") in namespace cache-a is cache a's` {
		t.Errorf("conflict: %v", err)
	}
	platform := &kube.Cluster{Server: "https://p"}
	cl, err := ConnectRef(context.Background(), config.ClusterRef{}, kube.Options{}, platform)
	if err != nil || cl != platform {
		t.Fatalf("the platform's cluster: %v %v", cl, err)
	}
	if o := c.attachment("a").Observe(context.Background(), &kube.Cluster{Server: "https://q"}, c["a"].Server); o.Reachable ||
		o.Problem != "the cluster reached is at https://q, not the cache's https://p" {
		t.Errorf("another cluster: %+v", o)
	}
}
