package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// chartPorts are the ports the real chart's containers declare or probe,
// in every chart version the shipped releases install (Argo CD's servers
// and metrics, Dex, Redis, Workflows, Events, Rollouts, app-proxy, the
// event reporters and sources server, the internal router). A server
// listens on all of them that are free, whichever component it plays.
var chartPorts = []int{443, 2746, 5556, 5557, 5558, 6060, 6379, 7000, 7777, 8080, 8081, 8082, 8083, 8084, 8087, 8088, 8090, 9090, 9100}

// role names the component a server plays, from its arguments and
// environment as the chart sets them.
func role(name string, args []string, env func(string) string) string {
	if len(args) > 0 && strings.HasPrefix(args[0], "/usr/local/bin/") {
		return strings.TrimPrefix(args[0], "/usr/local/bin/")
	}
	if slices.Contains(args, "--requirepass") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--requirepass ") }) {
		return "redis"
	}
	if d := env("DEPLOYMENT_NAME"); d != "" {
		return d
	}
	if b := env("BINARY_NAME"); b != "" {
		return b
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return name + " " + args[0]
	}
	return name
}

// redisPassword is the password a Redis invocation was given: the chart
// passes "--requirepass $(REDIS_PASSWORD)" as one argument, which the
// kubelet expands from the Secret argocd-redis.
func redisPassword(args []string) string {
	for i, a := range args {
		if a == "--requirepass" && i+1 < len(args) {
			return strings.TrimSpace(args[i+1])
		}
		if p, ok := strings.CutPrefix(a, "--requirepass "); ok {
			return strings.TrimSpace(p)
		}
	}
	return ""
}

// serve plays a long-running component: what it creates at start, then
// HTTP on every chart port until the context ends (SIGTERM).
func serve(ctx context.Context, name string, args []string, env func(string) string) error {
	who := role(name, args, env)
	switch who {
	case "redis":
		if p := redisPassword(args); p == "" || strings.Contains(p, "$(") {
			return errors.New("redis: no password given (--requirepass $(REDIS_PASSWORD), from the Secret argocd-redis that the chart's pre-install hook creates)")
		}
	case "argocd-server":
		if err := ensureSecrets(ctx, who, map[string]map[string]string{
			"argocd-initial-admin-secret": {"password": randomToken()},
		}); err != nil {
			return err
		}
	case "cap-app-proxy":
		if err := ensureSecrets(ctx, who, map[string]map[string]string{
			"codefresh-token": {"token": randomToken(), "encryptionIV": randomToken()[:16]},
			"argocd-token":    {"token": randomToken()},
		}); err != nil {
			return err
		}
	}
	return listen(ctx, who, chartPorts)
}

// listen answers HTTP on each free port of ports: 200 on every path (the
// chart's probes), Argo CD's version document on /api/version.
func listen(ctx context.Context, who string, ports []int) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"Version":"v0.0.0+gitops-standin"}`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok: %s (gitops-standin)\n", who)
	})
	var servers []*http.Server
	var bound []int
	errs := make(chan error, len(ports))
	for _, p := range ports {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			continue // taken: another container of the pod has it
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		bound = append(bound, p)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("port %d: %w", p, err)
			}
		}()
	}
	if len(servers) == 0 {
		return fmt.Errorf("%s: no port of %v is free", who, ports)
	}
	logf("%s: serving on %v", who, bound)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdown)
	}
	if err == nil {
		logf("%s: stopped", who)
	}
	return err
}
