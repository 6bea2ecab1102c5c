//go:build linux

package testservers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ starts rabbitmq-server (Debian's package) with a generated
// rabbitmq.conf: AMQP on a free loopback port, user/password as the default
// user (administrator of vhost /), no plugins, a unique node name, its own
// epmd on a free port and its Mnesia and log folders in a temporary folder.
// It returns the AMQP address once a connection with those credentials
// succeeds (about 7 s on 2 cores).
func RabbitMQ(t testing.TB, user, password string) string {
	t.Helper()
	return StartRabbitMQ(t, user, password).Addr
}

// RabbitMQServer is a running RabbitMQ.
type RabbitMQServer struct {
	// Addr is the AMQP address, 127.0.0.1:PORT.
	Addr string
	// CLIEnv is the environment under which rabbitmqctl (in
	// /usr/lib/rabbitmq/bin) reaches this node: its HOME (the Erlang
	// cookie), epmd port and node name.
	CLIEnv []string
}

// StartRabbitMQ is RabbitMQ, returning the server with the environment of
// its command-line tools.
func StartRabbitMQ(t testing.TB, user, password string) *RabbitMQServer {
	t.Helper()
	server := ensurePackage(t, "rabbitmq-server", "/usr/lib/rabbitmq/bin/rabbitmq-server")
	dir := tempDir(t, "onprem-rabbitmq-")
	for _, d := range []string{"mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port, distPort := FreePort(t), FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := fmt.Sprintf("listeners.tcp.default = %s\ndefault_user = %s\ndefault_pass = %s\ndefault_vhost = /\nloopback_users = none\n"+
		"default_permissions.configure = .*\ndefault_permissions.read = .*\ndefault_permissions.write = .*\n",
		addr, confValue(user), confValue(password))
	files := map[string]string{"rabbitmq.conf": conf, "enabled_plugins": "[].\n"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	node := "onprem-test-" + hex.EncodeToString(b[:]) + "@localhost"

	epmdPort := Epmd(t, "127.0.0.1")

	cmd := exec.Command(server)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"HOME="+dir, // the Erlang cookie
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"RABBITMQ_NODENAME="+node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_LOGS=-",
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbitmq.pid"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		// The script then execs the Erlang VM instead of starting it as
		// a child of its own: the VM is the process start watches, so
		// that it dies with the test process (Pdeathsig) even when the
		// test is killed before its cleanup runs; a VM left behind would
		// keep a core busy for every later run on the machine.
		"RUNNING_UNDER_SYSTEMD=true",
	)
	t0 := time.Now()
	p := start(t, "rabbitmq-server", filepath.Join(dir, "rabbitmq.log"), cmd)
	waitReady(t, p, 2*time.Minute, func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(dl)
		}
		conn, err := amqp.Open(c, amqp.Config{SASL: []amqp.Authentication{&amqp.PlainAuth{Username: user, Password: password}}, Vhost: "/"})
		if err != nil {
			c.Close()
			return err
		}
		return conn.Close()
	})
	t.Logf("testservers: RabbitMQ at %s, node %s (started in %s)", addr, node, time.Since(t0).Round(100*time.Millisecond))
	return &RabbitMQServer{Addr: addr, CLIEnv: []string{"HOME=" + dir, "ERL_EPMD_PORT=" + strconv.Itoa(epmdPort), "RABBITMQ_NODENAME=" + node,
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf")}}
}

// confValue quotes nothing: rabbitmq.conf (cuttlefish) takes the rest of
// the line; line breaks would end it.
func confValue(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		panic("testservers: rabbitmq user and password may not contain line breaks")
	}
	return s
}

// Epmd starts Erlang's port mapper daemon on a free port of address ("" for
// every address) and returns the port (give it to Erlang programs as
// ERL_EPMD_PORT). It runs in the foreground, so that it stops with the
// test: one that erl starts by itself would outlive it as a daemon, and one
// started inside a pod would die with that pod and take its peers' names
// with it.
func Epmd(t testing.TB, address string) int {
	t.Helper()
	epmd := ensurePackage(t, "erlang-base", "/usr/bin/epmd", "/usr/lib/erlang/erts-*/bin/epmd")
	port := FreePort(t)
	args := []string{"-port", strconv.Itoa(port)}
	if address != "" {
		args = append(args, "-address", address)
	} else {
		address = "127.0.0.1"
	}
	ep := start(t, "epmd", filepath.Join(tempDir(t, "onprem-epmd-"), "epmd.log"), exec.Command(epmd, args...))
	waitReady(t, ep, 10*time.Second, tcpReady(net.JoinHostPort(address, strconv.Itoa(port))))
	return port
}
