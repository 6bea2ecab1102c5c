package preflight

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/kube"
)

func TestSkewOf(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 300e6, time.UTC)
	if s := skewOf(t0.Truncate(time.Second), t0, t0.Add(100*time.Millisecond)); s != 0 {
		t.Errorf("rounding of the Date header counted as skew: %s", s)
	}
	if s := skewOf(t0.Add(-2*time.Minute), t0, t0); s != 2*time.Minute {
		t.Errorf("skew = %s", s)
	}
}

func TestClockSkew(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	env := clusterEnv(t, c)(clusterBaseSpec)
	t.Run("in step", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, clockSkewCheck(), env), Pass, "within 30s")
	})
	t.Run("two minutes", func(t *testing.T) {
		env.Now = func() time.Time { return time.Now().Add(-2 * time.Minute) }
		clusterExpect(t, clusterRun(t, clockSkewCheck(), env), Warn, "ahead of this machine's (more than 30s)", "NTP")
	})
	t.Run("ten minutes", func(t *testing.T) {
		env.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
		clusterExpect(t, clusterRun(t, clockSkewCheck(), env), Fail, "behind this machine's (more than 5m0s)", "certificates")
	})
	t.Run("no Date header", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Date"] = nil
			w.Write([]byte(`{"gitVersion":"v1.36.3"}`))
		}))
		defer srv.Close()
		e := &Env{Cluster: &kube.Cluster{Config: &rest.Config{Host: srv.URL}}, Now: time.Now}
		clusterExpect(t, clusterRun(t, clockSkewCheck(), e), Fail, "could not run: read the API server's time", "no Date header")
	})
}
