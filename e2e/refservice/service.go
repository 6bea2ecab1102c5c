// Package refservice is the reference service of the e2e ring: one small
// program that plays every platform service (pipelines-api, gitops-api,
// ...). It reads exactly the environment the service chart gives a service
// (charts/README.md: ONPREM_SERVICE, ONPREM_VERSION, PORT, and the
// MONGODB_*, POSTGRESQL_*, REDIS_*, RABBITMQ_* variables of what it uses),
// connects to its own databases with its own credentials, is Ready only
// when every dependency answers, serves its version, and has a tiny record
// API (write, read) through which the e2e proves that data survives
// upgrades. Its migrate command plays a release's migration.
//
// Endpoints, matched on the last path element so that any ingress route
// prefix works (/api/version, /gitops/api/records/k, ...):
//
//	GET  .../healthz          200 while the process runs
//	GET  .../readyz           200 when every dependency answers, else 503
//	GET  .../version          {"service", "version"}
//	GET  .../deps             each dependency and whether it answers
//	PUT  .../records/KEY      body = value; written to every database it uses
//	GET  .../records/KEY      the value read back from every database
//	POST .../messages         body = message; 200 once RabbitMQ confirms it (queue SERVICE.messages)
//	GET  .../messages         {"taken"}: every queued message, consumed
//	POST .../tokens           {"token"}: a token signed with the signing key
//	GET  .../tokens/TOKEN     200 when a key of the signing ring signed it, else 401
//	POST .../sealed           body = value; {"sealed"}: encrypted with the encryption key
//	GET  .../sealed/SEALED    {"value"} when a key of the encryption ring opens it, else 401
package refservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is the service's environment.
type Config struct {
	Service, Version string
	Port             int
	MongoDB          *Endpoint
	PostgreSQL       *Endpoint
	Redis            *Endpoint
	RabbitMQ         *Endpoint
	// Keys are the signing and encryption keys (nil: the service has
	// none).
	Keys *Keys
}

// Endpoint is one dependency's address and credentials.
type Endpoint struct {
	Host     string
	Port     int
	Database string
	Username string
	Password string
	// ReplicaSet is the replica set the host belongs to (MongoDB with
	// high availability): the host is then a seed the client discovers
	// the members and the primary from. Empty: one server.
	ReplicaSet string
}

// Addr is host:port.
func (e *Endpoint) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// FromEnv reads the configuration; getenv is os.Getenv in the program. A
// dependency is used when its HOST variable is set; every variable it then
// needs must be set too, or FromEnv names the missing ones.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{Service: getenv("ONPREM_SERVICE"), Version: getenv("ONPREM_VERSION"), Port: 8080}
	var missing []string
	if c.Service == "" {
		missing = append(missing, "ONPREM_SERVICE")
	}
	if p := getenv("PORT"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return c, fmt.Errorf("PORT=%q is not a TCP port", p)
		}
		c.Port = n
	}
	endpoint := func(prefix string, keys ...string) (*Endpoint, error) {
		if getenv(prefix+"_HOST") == "" {
			return nil, nil
		}
		e := &Endpoint{Host: getenv(prefix + "_HOST"), ReplicaSet: getenv(prefix + "_REPLICA_SET")}
		port := getenv(prefix + "_PORT")
		n, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("%s_PORT=%q is not a port", prefix, port)
		}
		e.Port = n
		for _, k := range keys {
			v := getenv(prefix + "_" + k)
			if v == "" {
				missing = append(missing, prefix+"_"+k)
			}
			switch k {
			case "DATABASE":
				e.Database = v
			case "USERNAME":
				e.Username = v
			case "PASSWORD":
				e.Password = v
			}
		}
		return e, nil
	}
	var err error
	if c.MongoDB, err = endpoint("MONGODB", "DATABASE", "USERNAME", "PASSWORD"); err != nil {
		return c, err
	}
	if c.PostgreSQL, err = endpoint("POSTGRESQL", "DATABASE", "USERNAME", "PASSWORD"); err != nil {
		return c, err
	}
	if c.Redis, err = endpoint("REDIS", "PASSWORD"); err != nil {
		return c, err
	}
	if c.RabbitMQ, err = endpoint("RABBITMQ", "USERNAME", "PASSWORD"); err != nil {
		return c, err
	}
	c.Keys = keysFromEnv(getenv, &missing)
	if len(missing) > 0 {
		return c, fmt.Errorf("missing environment: %s", strings.Join(missing, ", "))
	}
	return c, nil
}

// store is a database the records are written to.
type store interface {
	put(ctx context.Context, key, value, version string) error
	get(ctx context.Context, key string) (string, error)
	migrate(ctx context.Context, to string) error
	ping(ctx context.Context) error
	close(ctx context.Context)
}

// dependency is something the service needs to be Ready.
type dependency struct {
	name string
	ping func(ctx context.Context) error
}

// Service is a running reference service.
type Service struct {
	cfg    Config
	stores map[string]store
	deps   []dependency
}

// New connects lazily: a dependency that is down makes the service not
// Ready, never makes it exit.
func New(ctx context.Context, cfg Config) (*Service, error) {
	s := &Service{cfg: cfg, stores: map[string]store{}}
	if cfg.MongoDB != nil {
		m, err := newMongo(ctx, cfg.MongoDB)
		if err != nil {
			return nil, err
		}
		s.stores["mongodb"] = m
	}
	if cfg.PostgreSQL != nil {
		s.stores["postgresql"] = newPostgres(cfg.PostgreSQL)
	}
	for _, name := range s.storeNames() {
		s.deps = append(s.deps, dependency{name: name, ping: s.stores[name].ping})
	}
	if e := cfg.Redis; e != nil {
		s.deps = append(s.deps, dependency{name: "redis", ping: func(ctx context.Context) error { return redisPing(ctx, e) }})
	}
	if e := cfg.RabbitMQ; e != nil {
		s.deps = append(s.deps, dependency{name: "rabbitmq", ping: func(ctx context.Context) error { return rabbitPing(ctx, e) }})
	}
	return s, nil
}

// Close closes the database connections.
func (s *Service) Close(ctx context.Context) {
	for _, st := range s.stores {
		st.close(ctx)
	}
}

func (s *Service) storeNames() []string {
	names := make([]string, 0, len(s.stores))
	for n := range s.stores {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Health is each dependency's state.
type Health struct {
	Service string            `json:"service"`
	Version string            `json:"version"`
	Ready   bool              `json:"ready"`
	Deps    map[string]string `json:"deps"` // "ok" or the error
}

// Check pings every dependency (each bounded by a few seconds).
func (s *Service) Check(ctx context.Context) Health {
	h := Health{Service: s.cfg.Service, Version: s.cfg.Version, Ready: true, Deps: map[string]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, d := range s.deps {
		wg.Add(1)
		go func(d dependency) {
			defer wg.Done()
			c, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			err := d.ping(c)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				h.Ready = false
				h.Deps[d.name] = err.Error()
			} else {
				h.Deps[d.name] = "ok"
			}
		}(d)
	}
	wg.Wait()
	return h
}

// Put writes a record to every database the service uses.
func (s *Service) Put(ctx context.Context, key, value string) error {
	if len(s.stores) == 0 {
		return errors.New("this service uses no database")
	}
	for _, n := range s.storeNames() {
		if err := s.stores[n].put(ctx, key, value, s.cfg.Version); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}

// Get reads a record back from every database the service uses.
func (s *Service) Get(ctx context.Context, key string) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range s.storeNames() {
		v, err := s.stores[n].get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out[n] = v
	}
	return out, nil
}

// ErrNotFound: no record under that key.
var ErrNotFound = errors.New("no such record")

// Migrate plays a release's migration: it records the target version in
// every database the service uses. FailMigrationEnv makes it fail on
// purpose (exit 1 in the program), as a broken migration would.
func (s *Service) Migrate(ctx context.Context, to string) error {
	if v := os.Getenv(FailMigrationEnv); v == "true" || v == "1" {
		return fmt.Errorf("migration to %s failed on purpose (%s=%s)", to, FailMigrationEnv, v)
	}
	for _, n := range s.storeNames() {
		if err := s.stores[n].migrate(ctx, to); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}

// FailMigrationEnv makes `refservice migrate` fail (the e2e sets it on a
// migration Job through an overlay).
const FailMigrationEnv = "ONPREM_FAIL_MIGRATION"

// Handler serves the endpoints.
func (s *Service) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || r.URL.Path == "/index.html" {
			s.front(w, r)
			return
		}
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		last := parts[len(parts)-1]
		if len(parts) >= 2 && parts[len(parts)-2] == "records" {
			s.records(w, r, last)
			return
		}
		if last == "messages" {
			s.messages(w, r)
			return
		}
		if last == "tokens" || last == "sealed" || len(parts) >= 2 && (parts[len(parts)-2] == "tokens" || parts[len(parts)-2] == "sealed") {
			s.keys(w, r, parts)
			return
		}
		switch last {
		case "healthz":
			writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
		case "readyz", "deps":
			h := s.Check(r.Context())
			code := http.StatusOK
			if !h.Ready && last == "readyz" {
				code = http.StatusServiceUnavailable
			}
			writeJSON(w, code, h)
		case "version":
			writeJSON(w, http.StatusOK, map[string]string{"service": s.cfg.Service, "version": s.cfg.Version})
		default:
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint: " + r.URL.Path})
		}
	})
}

// frontPage is what a browser sees at the root: which service and version
// this is, and whether what it depends on answers.
var frontPage = template.Must(template.New("front").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Service}} {{.Version}}</title>
<style>body{font-family:sans-serif;margin:2em}td,th{padding:.2em 1em;text-align:left}.ok{color:#070}.down{color:#b00}</style></head>
<body><h1>{{.Service}}</h1>
<p>Platform version <strong>{{.Version}}</strong>: {{if .Ready}}<span class="ok">ready</span>{{else}}<span class="down">not ready</span>{{end}}</p>
{{if .Deps}}<table><tr><th>depends on</th><th>state</th></tr>
{{range $name, $state := .Deps}}<tr><td>{{$name}}</td><td class="{{if eq $state "ok"}}ok{{else}}down{{end}}">{{$state}}</td></tr>
{{end}}</table>{{else}}<p>It depends on no database.</p>{{end}}
<p><a href="version">version</a> · <a href="deps">dependencies (JSON)</a></p>
</body></html>
`))

// front serves the front page (200 when ready, 503 when not, like
// readyz).
func (s *Service) front(w http.ResponseWriter, r *http.Request) {
	h := s.Check(r.Context())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if !h.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = frontPage.Execute(w, h)
}

func (s *Service) records(w http.ResponseWriter, r *http.Request, key string) {
	switch r.Method {
	case http.MethodPut, http.MethodPost:
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		if err := s.Put(r.Context(), key, string(body)); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"key": key, "written": "true"})
	case http.MethodGet:
		got, err := s.Get(r.Context(), key)
		switch {
		case errors.Is(err, ErrNotFound):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, http.StatusOK, map[string]any{"key": key, "values": got})
		}
	default:
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "GET or PUT"})
	}
}

// brokerTimeout bounds a publish: the connection, the queue's declaration
// and the broker's confirm.
const brokerTimeout = 5 * time.Second

// messages publishes a message (POST, answered once the broker confirms
// it) or takes every queued one (GET).
func (s *Service) messages(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		// Bounded as a service's own calls are: a broker that does not
		// answer (its node lost) is an error at once, not a hung request.
		ctx, cancel := context.WithTimeout(r.Context(), brokerTimeout)
		defer cancel()
		if err := s.Publish(ctx, string(body)); err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, ErrNoRabbitMQ) {
				code = http.StatusNotImplemented
			}
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"queue": QueueName(s.cfg.Service), "confirmed": "true"})
	case http.MethodGet:
		ctx, cancel := context.WithTimeout(r.Context(), 4*brokerTimeout)
		defer cancel()
		taken, err := s.Take(ctx)
		if err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, ErrNoRabbitMQ) {
				code = http.StatusNotImplemented
			}
			writeJSON(w, code, map[string]any{"error": err.Error(), "taken": taken})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"queue": QueueName(s.cfg.Service), "taken": taken})
	default:
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "GET or POST"})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// keys serves tokens and sealed values (Keys).
func (s *Service) keys(w http.ResponseWriter, r *http.Request, parts []string) {
	k := s.cfg.Keys
	if k == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": s.cfg.Service + " has no keys (uses.keys)"})
		return
	}
	last, prev := parts[len(parts)-1], ""
	if len(parts) >= 2 {
		prev = parts[len(parts)-2]
	}
	switch {
	case last == "tokens" && r.Method == http.MethodPost:
		writeJSON(w, http.StatusOK, map[string]string{"token": k.Token(s.cfg.Service, time.Now())})
	case last == "sealed" && (r.Method == http.MethodPost || r.Method == http.MethodPut):
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		sealed, err := k.Seal(body)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"sealed": sealed})
	case prev == "tokens" && r.Method == http.MethodGet:
		if err := k.VerifyToken(last); err != nil {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"valid": false, "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"valid": true})
	case prev == "sealed" && r.Method == http.MethodGet:
		v, err := k.Unseal(last)
		if err != nil {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"value": string(v)})
	default:
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST .../tokens, GET .../tokens/TOKEN, POST .../sealed, GET .../sealed/VALUE"})
	}
}
