package apply

import (
	"context"
	"testing"
	"time"

	"onprem.dev/onprem/e2e/testcluster"
)

// BenchmarkConvergedRerun applies the whole, already installed platform
// again against the integration ring: every component is found unchanged
// and nothing is written. Target: under 5 s.
func BenchmarkConvergedRerun(b *testing.B) {
	c := testcluster.Start(b)
	res := renderFile(b, platform)
	opts := Options{Getter: getter(c), Client: c.Client, Result: res, Timeout: 3 * time.Minute}
	if _, err := Apply(context.Background(), opts); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		rep, err := Apply(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		for _, comp := range rep.Components {
			if comp.Action != Unchanged {
				b.Fatalf("%s: %s", comp.Name, comp.Action)
			}
		}
	}
}
