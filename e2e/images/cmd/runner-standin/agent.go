package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// requiredAgentEnv is the environment the runner chart always gives the
// agent and without which a real agent could not register.
var requiredAgentEnv = []string{"ONPREM_RUNNER_NAME", "ONPREM_VERSION", "ONPREM_PLATFORM_URL", "ONPREM_RUNNER_TOKEN", "BUILDKIT_HOST"}

// readyTimeout keeps /readyz under the chart's probe timeout (3 s).
const readyTimeout = 2 * time.Second

// agentConfig is the agent's environment, checked. The token is kept only
// to prove that one was given: nothing prints it.
type agentConfig struct {
	name, version, platformURL, engine string
	namespace, platformCA, port        string
	concurrency                        int
	hasToken                           bool
}

// loadAgentConfig reads and checks the chart's environment. Its errors
// never quote the token.
func loadAgentConfig(getenv func(string) string) (agentConfig, error) {
	var missing []string
	for _, n := range requiredAgentEnv {
		if strings.TrimSpace(getenv(n)) == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return agentConfig{}, fmt.Errorf("missing environment: %s (the runner chart sets them all)", strings.Join(missing, ", "))
	}
	c := agentConfig{
		name:        getenv("ONPREM_RUNNER_NAME"),
		version:     getenv("ONPREM_VERSION"),
		platformURL: getenv("ONPREM_PLATFORM_URL"),
		engine:      getenv("BUILDKIT_HOST"),
		namespace:   getenv("ONPREM_RUNNER_NAMESPACE"),
		platformCA:  getenv("ONPREM_PLATFORM_CA"),
		port:        getenv("PORT"),
		concurrency: 1,
		hasToken:    true,
	}
	u, err := url.Parse(c.platformURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return agentConfig{}, fmt.Errorf("ONPREM_PLATFORM_URL %q: want an http(s) URL such as https://ci.example.com/api", c.platformURL)
	}
	if _, err := parseEndpoint(c.engine); err != nil {
		return agentConfig{}, fmt.Errorf("BUILDKIT_HOST: %w", err)
	}
	if c.port == "" {
		c.port = "8080"
	}
	if p, err := strconv.Atoi(c.port); err != nil || p < 0 || p > 65535 {
		return agentConfig{}, fmt.Errorf("PORT %q: want a port number", c.port)
	}
	if s := getenv("ONPREM_RUNNER_CONCURRENCY"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return agentConfig{}, fmt.Errorf("ONPREM_RUNNER_CONCURRENCY %q: want a positive number", s)
		}
		c.concurrency = n
	}
	return c, nil
}

// agent serves the agent's HTTP endpoints.
type agent struct {
	cfg  agentConfig
	logf func(string, ...any)

	mu        sync.Mutex
	lastReady *bool // the last /readyz outcome, to log changes only
}

func (a *agent) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Alive as long as it serves: the engine's state is /readyz's.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"runner": a.cfg.name, "version": a.cfg.version})
	})
	return mux
}

// readyz: a real agent is ready once registered; this one, once the
// engine it hands builds to answers (the part of the runner the e2e can
// check without a platform that accepts registrations).
func (a *agent) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	id, err := queryWorkers(r.Context(), a.cfg.engine, readyTimeout)
	a.noteReady(err)
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	fmt.Fprintf(w, "ready: engine worker %s\n", id)
}

// noteReady logs when readiness changes (the probe runs every 5 s: one
// line per probe would drown the log).
func (a *agent) noteReady(err error) {
	ready := err == nil
	a.mu.Lock()
	changed := a.lastReady == nil || *a.lastReady != ready
	a.lastReady = &ready
	a.mu.Unlock()
	if !changed {
		return
	}
	if ready {
		a.logf("ready: the engine at %s answers", a.cfg.engine)
	} else {
		a.logf("not ready: %v", err)
	}
}

// agentMain serves until ctx ends (SIGTERM) and returns the exit code.
func agentMain(ctx context.Context, getenv func(string) string, stderr io.Writer) int {
	logf := func(format string, v ...any) { fmt.Fprintf(stderr, roleAgent+" (e2e stand-in): "+format+"\n", v...) }
	cfg, err := loadAgentConfig(getenv)
	if err != nil {
		logf("%v", err)
		return 2
	}
	ca := "none (the system's certificates)"
	if cfg.platformCA != "" {
		ca = cfg.platformCA
		if _, err := os.Stat(cfg.platformCA); err != nil {
			// The chart's ConfigMap is optional: absent when the platform
			// has a publicly trusted certificate.
			ca += " (absent: the system's certificates)"
		}
	}
	logf("runner %s, version %s, platform %s (not contacted: stand-in), namespace %q, concurrency %d, engine %s, platform CA %s, token given",
		cfg.name, cfg.version, cfg.platformURL, cfg.namespace, cfg.concurrency, cfg.engine, ca)
	l, err := net.Listen("tcp", ":"+cfg.port)
	if err != nil {
		logf("listening on port %s: %v", cfg.port, err)
		return 1
	}
	a := &agent{cfg: cfg, logf: logf}
	srv := &http.Server{Handler: a.routes(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	logf("serving /healthz, /readyz and /version on %s", l.Addr())
	select {
	case err := <-done:
		logf("serving: %v", err)
		return 1
	case <-ctx.Done():
	}
	logf("stopping")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		logf("stopping: %v", err)
		return 1
	}
	return 0
}
