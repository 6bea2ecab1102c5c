package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// defaultConfig is where buildkitd reads its configuration from when no
// --config is given (and the file exists).
const defaultConfig = "/etc/buildkit/buildkitd.toml"

// buildkitdArgs are the flags of buildkitd that the stand-in knows: the
// runner chart's, and --addr, which overrides the configured addresses.
type buildkitdArgs struct {
	config           string
	configGiven      bool
	addrs            []string
	noProcessSandbox bool
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// parseBuildkitdArgs reads buildkitd's command line. Unknown flags and
// arguments are errors: a chart that passes something else must be
// noticed, not silently ignored.
func parseBuildkitdArgs(args []string, stderr io.Writer) (buildkitdArgs, error) {
	var a buildkitdArgs
	fset := flag.NewFlagSet(roleBuildkitd, flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprintf(stderr, "usage: buildkitd [--config FILE] [--addr ADDRESS]... [--oci-worker-no-process-sandbox]\n"+
			"(the e2e stand-in for rootless BuildKit: other buildkitd flags are not supported)\n")
	}
	fset.StringVar(&a.config, "config", defaultConfig, "configuration file (TOML); only [grpc] address is read")
	addrs := (*listFlag)(&a.addrs)
	fset.Var(addrs, "addr", "address to listen on (unix:///PATH or tcp://HOST:PORT), repeatable; replaces [grpc] address")
	fset.BoolVar(&a.noProcessSandbox, "oci-worker-no-process-sandbox", false, "accepted: the stand-in runs no build steps")
	if err := fset.Parse(args); err != nil {
		return a, err
	}
	if fset.NArg() > 0 {
		fset.Usage()
		return a, fmt.Errorf("unexpected arguments %q: buildkitd takes flags only", strings.Join(fset.Args(), " "))
	}
	fset.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			a.configGiven = true
		}
	})
	return a, nil
}

// buildkitdMain runs the engine until ctx ends (SIGTERM) and returns the
// exit code.
func buildkitdMain(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	logf := func(format string, v ...any) { fmt.Fprintf(stderr, "buildkitd (e2e stand-in): "+format+"\n", v...) }
	a, err := parseBuildkitdArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		logf("%v", err)
		return 2
	}
	addrs, err := listenAddresses(a, getenv)
	if err != nil {
		logf("%v", err)
		return 1
	}
	id, err := newWorkerID()
	if err != nil {
		logf("%v", err)
		return 1
	}
	srv := &engine{workerID: id, conns: map[net.Conn]bool{}}
	for _, addr := range addrs {
		if err := srv.listen(addr); err != nil {
			srv.close()
			logf("%v", err)
			return 1
		}
		logf("listening on %s", addr)
	}
	logf("worker %s ready (no builds run here: this engine only answers `buildctl debug workers`)", id)
	srv.serve(logf)
	<-ctx.Done()
	logf("stopping")
	srv.close()
	return 0
}

// listenAddresses are the engine's addresses: --addr, else the config
// file's [grpc] address, else buildkitd's default socket.
func listenAddresses(a buildkitdArgs, getenv func(string) string) ([]endpoint, error) {
	raw := a.addrs
	if len(raw) == 0 {
		data, err := os.ReadFile(a.config)
		switch {
		case err == nil:
			if raw, err = grpcAddresses(string(data)); err != nil {
				return nil, fmt.Errorf("config %s: %w", a.config, err)
			}
		case errors.Is(err, fs.ErrNotExist) && !a.configGiven:
			// buildkitd runs on defaults without its default file.
		default:
			return nil, fmt.Errorf("reading the config: %w", err)
		}
	}
	if len(raw) == 0 {
		// buildkitd's default: rootless, the socket goes under the user's
		// runtime folder.
		dir := "/run"
		if x := getenv("XDG_RUNTIME_DIR"); x != "" && os.Geteuid() != 0 {
			dir = x
		}
		raw = []string{"unix://" + filepath.Join(dir, "buildkit", "buildkitd.sock")}
	}
	var out []endpoint
	for _, r := range raw {
		ep, err := parseEndpoint(r)
		if err != nil {
			return nil, err
		}
		out = append(out, ep)
	}
	return out, nil
}

// grpcAddresses reads the [grpc] table's address array (or a top-level
// grpc.address) out of a buildkitd.toml. It knows just enough TOML for
// that: tables, comments, and arrays of basic or literal strings spread
// over several lines; every other key is skipped unread.
func grpcAddresses(doc string) ([]string, error) {
	table := ""
	var (
		found   []string
		seen    bool
		pending strings.Builder // an array value still open
		inValue bool
		startNo int
	)
	lines := strings.Split(doc, "\n")
	for i, raw := range lines {
		line := strings.TrimSpace(stripComment(raw))
		if inValue {
			pending.WriteString("\n" + line)
			if !balanced(pending.String()) {
				continue
			}
			inValue = false
			v, err := stringArray(pending.String())
			if err != nil {
				return nil, fmt.Errorf("line %d: grpc address: %w", startNo, err)
			}
			found = v
			continue
		}
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "[") {
			// [[array.of.tables]] never is [grpc]: note it as another table.
			name := strings.Trim(line, "[]")
			table = strings.ReplaceAll(strings.TrimSpace(name), " ", "")
			if strings.HasPrefix(line, "[[") {
				table = "[[" + table
			}
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue // not a key/value line: not ours to judge
		}
		key = strings.ReplaceAll(strings.TrimSpace(key), " ", "")
		if !(table == "grpc" && key == "address") && !(table == "" && key == "grpc.address") {
			continue
		}
		if seen {
			return nil, fmt.Errorf("line %d: grpc address is set twice", i+1)
		}
		seen, startNo = true, i+1
		pending.Reset()
		pending.WriteString(strings.TrimSpace(value))
		if !balanced(pending.String()) {
			inValue = true
			continue
		}
		v, err := stringArray(pending.String())
		if err != nil {
			return nil, fmt.Errorf("line %d: grpc address: %w", startNo, err)
		}
		found = v
	}
	if inValue {
		return nil, fmt.Errorf("line %d: grpc address: the array is never closed", startNo)
	}
	return found, nil
}

// stripComment cuts a TOML comment off a line, minding strings.
func stripComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '"' && c == '\\':
			i++ // an escaped character, perhaps a quote
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\''):
			quote = c
		case quote == 0 && c == '#':
			return line[:i]
		}
	}
	return line
}

// balanced reports whether every bracket opened outside strings in s is
// closed.
func balanced(s string) bool {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"' && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\''):
			quote = c
		case quote == 0 && c == '[':
			depth++
		case quote == 0 && c == ']':
			depth--
		}
	}
	return depth <= 0
}

// stringArray parses a TOML array of strings: ["a", 'b',] over any lines.
func stringArray(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, fmt.Errorf("%q is not an array of strings", s)
	}
	rest := s[1 : len(s)-1]
	var out []string
	for {
		rest = strings.TrimLeft(rest, " \t\r\n")
		if rest == "" {
			return out, nil
		}
		var elem string
		switch rest[0] {
		case '"':
			end := 1
			for end < len(rest) && rest[end] != '"' {
				if rest[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(rest) {
				return nil, fmt.Errorf("unterminated string in %q", s)
			}
			v, err := strconv.Unquote(rest[:end+1])
			if err != nil {
				return nil, fmt.Errorf("string %s: %w", rest[:end+1], err)
			}
			elem, rest = v, rest[end+1:]
		case '\'':
			end := strings.IndexByte(rest[1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated string in %q", s)
			}
			elem, rest = rest[1:end+1], rest[end+2:]
		default:
			return nil, fmt.Errorf("%q is not an array of strings", s)
		}
		out = append(out, elem)
		rest = strings.TrimLeft(rest, " \t\r\n")
		if rest == "" {
			return out, nil
		}
		if rest[0] != ',' {
			return nil, fmt.Errorf("a comma is missing after %q in %q", elem, s)
		}
		rest = rest[1:]
	}
}

// newWorkerID is a random id, as BuildKit gives each worker.
func newWorkerID() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("a worker id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// engine is the engine's listeners and open connections.
type engine struct {
	workerID  string
	mu        sync.Mutex
	listeners []net.Listener
	conns     map[net.Conn]bool
	closed    bool
	wg        sync.WaitGroup
}

// listen opens one address. A unix socket's folder is created (it lives
// on an emptyDir that starts empty) and a socket left by an earlier run
// is replaced; any other file in its place is an error.
func (e *engine) listen(ep endpoint) error {
	if ep.network == "unix" {
		if err := os.MkdirAll(filepath.Dir(ep.address), 0o700); err != nil {
			return fmt.Errorf("creating the socket folder of %s: %w", ep, err)
		}
		if st, err := os.Lstat(ep.address); err == nil {
			if st.Mode()&fs.ModeSocket == 0 {
				return fmt.Errorf("listening on %s: %s exists and is not a socket", ep, ep.address)
			}
			if err := os.Remove(ep.address); err != nil {
				return fmt.Errorf("removing the stale socket %s: %w", ep.address, err)
			}
		}
	}
	l, err := net.Listen(ep.network, ep.address)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", ep, err)
	}
	e.mu.Lock()
	e.listeners = append(e.listeners, l)
	e.mu.Unlock()
	return nil
}

// serve accepts connections on every listener in the background.
func (e *engine) serve(logf func(string, ...any)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.listeners {
		e.wg.Add(1)
		go func(l net.Listener) {
			defer e.wg.Done()
			for {
				c, err := l.Accept()
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err != nil {
					// Out of descriptors, say: wait instead of spinning.
					logf("accepting on %s: %v", l.Addr(), err)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if !e.track(c, true) {
					c.Close()
					return
				}
				e.wg.Add(1)
				go func() {
					defer e.wg.Done()
					defer e.track(c, false)
					serveConn(c, e.workerID)
				}()
			}
		}(l)
	}
}

// track adds or forgets a connection; adding fails once closed.
func (e *engine) track(c net.Conn, add bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !add {
		delete(e.conns, c)
		return true
	}
	if e.closed {
		return false
	}
	e.conns[c] = true
	return true
}

// close stops listening (a unix socket's file goes with its listener),
// ends the open connections and waits for every goroutine.
func (e *engine) close() {
	e.mu.Lock()
	e.closed = true
	for _, l := range e.listeners {
		_ = l.Close()
	}
	for c := range e.conns {
		_ = c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
}
