package preflight

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
)

func TestParseServerVersion(t *testing.T) {
	for in, want := range map[string]string{
		"15.6 (Debian 15.6-0+deb12u1)": "15.6.0",
		"7.0.42":                       "7.0.42",
		"3.10.8":                       "3.10.8",
		"v6.2.14":                      "6.2.14",
		"16beta1":                      "16.0.0",
	} {
		v, err := parseServerVersion(in)
		if err != nil || v.String() != want {
			t.Errorf("%q: %v %v, want %s", in, v, err, want)
		}
	}
	if _, err := parseServerVersion("unknown"); err == nil {
		t.Error("no error for a version without a number")
	}
}

func TestRESPReplies(t *testing.T) {
	var sent bytes.Buffer
	conn := struct {
		io.Reader
		io.Writer
	}{strings.NewReader("+OK\r\n$32\r\n# Server\r\nredis_version:7.0.15\r\n\r\n-WRONGPASS invalid username-password pair\r\n*2\r\n:1\r\n$-1\r\nHTTP/1.1 400\r\n"), &sent}
	r := newRESP(conn)
	if s, err := r.do("AUTH", "pw"); err != nil || s != "OK" {
		t.Errorf("AUTH: %q %v", s, err)
	}
	if sent.String() != "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n" {
		t.Errorf("sent %q", sent.String())
	}
	s, err := r.reply(0)
	if err != nil || infoField(s, "redis_version") != "7.0.15" {
		t.Errorf("INFO: %q %v", s, err)
	}
	if _, err := r.reply(0); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("error reply: %v", err)
	}
	if s, err := r.reply(0); err != nil || s != "1\n" {
		t.Errorf("array: %q %v", s, err)
	}
	if _, err := r.reply(0); err == nil || !strings.Contains(err.Error(), "not a Redis server") {
		t.Errorf("HTTP answer: %v", err)
	}
}

func TestDatabaseCheckWithoutClusterOrConfigDoesNotPanic(t *testing.T) {
	for _, c := range connectionChecks() {
		o := c.Run(context.Background(), &Env{})
		if o.Result != Fail || o.Remediation == "" {
			t.Errorf("%s without configuration: %+v", c.ID, o)
		}
	}
}

// connHangingListener accepts connections and never answers; it returns the
// port.
func connHangingListener(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}
