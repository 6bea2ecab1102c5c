package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// The line protocol between the stand-in's roles, in place of BuildKit's
// gRPC API: a client sends "workers\n"; the engine answers
// "ok <worker-id>\n". Any other line gets "error unknown request <line>\n".
// A connection may carry several requests; one that says nothing is closed
// after idleTimeout (a tcpSocket probe only connects and closes).
const (
	requestWorkers = "workers"
	replyOK        = "ok"
	idleTimeout    = 30 * time.Second
	// maxLine bounds what the engine reads of one request: a client that
	// sends garbage without a newline cannot make it buffer without end.
	maxLine = 1024
)

// endpoint is a BuildKit address: unix:///path or tcp://host:port, the
// two forms the runner chart uses (BUILDKIT_HOST and [grpc] address).
type endpoint struct {
	network string // "unix" or "tcp"
	address string // the socket's path, or host:port
}

func (e endpoint) String() string { return e.network + "://" + e.address }

// parseEndpoint reads a BuildKit address. Other schemes of buildctl
// (docker-container://, kube-pod://, ...) have no meaning here.
func parseEndpoint(s string) (endpoint, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return endpoint{}, fmt.Errorf("address %q: want unix:///PATH or tcp://HOST:PORT", s)
	}
	switch scheme {
	case "unix":
		if !strings.HasPrefix(rest, "/") {
			return endpoint{}, fmt.Errorf("address %q: the socket path must be absolute (unix:///PATH)", s)
		}
		return endpoint{network: "unix", address: rest}, nil
	case "tcp":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return endpoint{}, fmt.Errorf("address %q: %w", s, err)
		}
		if port == "" {
			return endpoint{}, fmt.Errorf("address %q: no port", s)
		}
		return endpoint{network: "tcp", address: net.JoinHostPort(host, port)}, nil
	}
	return endpoint{}, fmt.Errorf("address %q: unsupported scheme %q (this stand-in speaks unix:// and tcp:// only)", s, scheme)
}

// queryWorkers asks the engine at addr for its worker and returns the
// worker's id.
func queryWorkers(ctx context.Context, addr string, timeout time.Duration) (string, error) {
	ep, err := parseEndpoint(addr)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, ep.network, ep.address)
	if err != nil {
		return "", fmt.Errorf("connecting to the engine at %s: %w", ep, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, requestWorkers+"\n"); err != nil {
		return "", fmt.Errorf("asking the engine at %s for its workers: %w", ep, err)
	}
	line, err := bufio.NewReader(io.LimitReader(c, maxLine)).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the answer of the engine at %s: %w", ep, err)
	}
	line = strings.TrimRight(line, "\r\n")
	word, id, _ := strings.Cut(line, " ")
	if word != replyOK || strings.TrimSpace(id) == "" {
		return "", fmt.Errorf("the engine at %s answered %q, want %q", ep, line, replyOK+" <worker-id>")
	}
	return strings.TrimSpace(id), nil
}

// serveConn answers the requests of one connection until it closes, says
// something the protocol does not know, or stays idle too long.
func serveConn(c net.Conn, workerID string) {
	defer c.Close()
	r := bufio.NewReaderSize(c, maxLine)
	for {
		_ = c.SetDeadline(time.Now().Add(idleTimeout))
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			_, _ = io.WriteString(c, "error request too long\n")
			return
		}
		if err != nil {
			return // closed, idle or broken: nothing to answer
		}
		req := strings.TrimRight(string(line), "\r\n")
		if req == requestWorkers {
			if _, err := io.WriteString(c, replyOK+" "+workerID+"\n"); err != nil {
				return
			}
			continue
		}
		_, _ = fmt.Fprintf(c, "error unknown request %q\n", req)
		return
	}
}
