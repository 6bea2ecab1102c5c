package preflight

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// redisCheck authenticates to an external Redis (AUTH user pass with an
// ACL user, AUTH pass without) and reads redis_version from INFO server.
func redisCheck(min string) Check {
	return databaseSpec{name: "redis", product: "Redis", min: min, userOptional: true, handshake: redisHandshake}.check()
}

func redisHandshake(ctx context.Context, ep *dbEndpoint) (string, error) {
	var conn net.Conn
	var err error
	if ep.TLS {
		conn, err = (&tls.Dialer{Config: ep.tlsConfig()}).DialContext(ctx, "tcp", ep.Addr())
	} else {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", ep.Addr())
	}
	if err != nil {
		return "", classifyNetError(err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	r := newRESP(conn)
	auth := []string{"AUTH", ep.Password}
	if ep.Username != "" {
		auth = []string{"AUTH", ep.Username, ep.Password}
	}
	if _, err := r.do(auth...); err != nil {
		var re respError
		if errors.As(err, &re) {
			msg := string(re)
			switch {
			case strings.HasPrefix(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"), strings.Contains(msg, "invalid username-password"):
				return "", credentialsError(err)
			case strings.Contains(msg, "without any password configured"):
				return "", &handshakeError{kind: problemProtocol, err: fmt.Errorf("%w (the server has no password: it accepts anyone; the platform expects one)", err)}
			}
			return "", &handshakeError{kind: problemProtocol, err: fmt.Errorf("AUTH: %w", err)}
		}
		return "", classifyNetError(fmt.Errorf("AUTH: %w", err))
	}
	info, err := r.do("INFO", "server")
	if err != nil {
		var re respError
		if errors.As(err, &re) && strings.HasPrefix(string(re), "NOPERM") {
			return "", credentialsError(fmt.Errorf("INFO server: %w", err))
		}
		return "", classifyNetError(fmt.Errorf("INFO server: %w", err))
	}
	if v := infoField(info, "redis_version"); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("INFO server has no redis_version")
}

// infoField returns a field of an INFO reply ("key:value" lines).
func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// respError is an error reply (-ERR ...) of a Redis server.
type respError string

func (e respError) Error() string { return "redis: " + string(e) }

// resp is a minimal RESP2 client: commands as arrays of bulk strings,
// replies of every RESP2 type (arrays are flattened to their lines).
type resp struct {
	rw *bufio.ReadWriter
}

func newRESP(c io.ReadWriter) *resp {
	return &resp{rw: bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))}
}

// maxBulk bounds a bulk reply (INFO is a few kB).
const maxBulk = 1 << 20

func (r *resp) do(args ...string) (string, error) {
	fmt.Fprintf(r.rw, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(r.rw, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := r.rw.Flush(); err != nil {
		return "", err
	}
	return r.reply(0)
}

func (r *resp) line() (string, error) {
	s, err := r.rw.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("the server closed the connection: %w", io.ErrUnexpectedEOF)
		}
		return "", err
	}
	if len(s) > maxBulk {
		return "", fmt.Errorf("reply line too long")
	}
	return strings.TrimRight(s, "\r\n"), nil
}

func (r *resp) reply(depth int) (string, error) {
	if depth > 4 {
		return "", fmt.Errorf("reply nested too deeply")
	}
	l, err := r.line()
	if err != nil {
		return "", err
	}
	if l == "" {
		return "", fmt.Errorf("empty reply line: not a Redis server")
	}
	switch l[0] {
	case '+', ':':
		return l[1:], nil
	case '-':
		return "", respError(l[1:])
	case '$':
		n, err := strconv.Atoi(l[1:])
		if err != nil || n > maxBulk {
			return "", fmt.Errorf("bad bulk length %q: not a Redis server", l)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r.rw, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(l[1:])
		if err != nil || n > 1024 {
			return "", fmt.Errorf("bad array length %q: not a Redis server", l)
		}
		var parts []string
		for range n {
			p, err := r.reply(depth + 1)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q: not a Redis server", truncate(l, 40))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
