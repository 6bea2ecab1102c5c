// Command refservice is the e2e ring's reference service (see package
// refservice): `refservice` serves, `refservice migrate --to VERSION` plays
// a release's migration and exits 1 if it fails, `refservice dial
// HOST:PORT...` says which addresses accept a TCP connection (the e2e's
// NetworkPolicy probes, from inside a pod).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"onprem.dev/onprem/e2e/refservice"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if len(args) > 0 && args[0] == "dial" {
		return dial(ctx, args[1:])
	}
	cfg, err := refservice.FromEnv(os.Getenv)
	if err != nil {
		log.Error("configuration", "error", err)
		return 2
	}
	svc, err := refservice.New(ctx, cfg)
	if err != nil {
		log.Error("start", "error", err)
		return 1
	}
	defer svc.Close(context.Background())
	if len(args) > 0 && args[0] == "migrate" {
		fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
		to := fs.String("to", "", "the version migrated to")
		if err := fs.Parse(args[1:]); err != nil || *to == "" {
			fmt.Fprintln(os.Stderr, "usage: refservice migrate --to VERSION")
			return 2
		}
		mctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := migrate(mctx, svc, *to, log); err != nil {
			log.Error("migration failed", "service", cfg.Service, "to", *to, "error", err)
			return 1
		}
		log.Info("migrated", "service", cfg.Service, "to", *to)
		return 0
	}
	srv := &http.Server{Addr: ":" + strconv.Itoa(cfg.Port), Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("serving", "service", cfg.Service, "version", cfg.Version, "port", cfg.Port)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("serve", "error", err)
		return 1
	}
	return 0
}

// dial tries one TCP connection to each address (3 s at most each) and
// prints "open ADDR" or "closed ADDR: why", one line per address, in
// order. It needs no configuration, so that any pod running the image can
// probe its network.
//
// --after waits that long first: a new pod's NetworkPolicy rules may be
// programmed a moment after the pod starts (kube-router does it at its
// next sync), and a probe tests the policy, not that moment.
func dial(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("dial", flag.ContinueOnError)
	after := fs.Duration("after", 0, "wait this long before dialing")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: refservice dial [--after DURATION] HOST:PORT...")
		return 2
	}
	addrs := fs.Args()
	select {
	case <-ctx.Done():
		return 1
	case <-time.After(*after):
	}
	d := net.Dialer{Timeout: 3 * time.Second}
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", a)
		if err != nil {
			fmt.Printf("closed %s: %v\n", a, err)
			continue
		}
		c.Close()
		fmt.Printf("open %s\n", a)
	}
	return 0
}

// migrate runs the migration, retrying for a minute while a database
// refuses the connection: a migration Job's pod is new, and on a network
// plugin that enforces NetworkPolicies its address may join the
// database's allow-list a moment after it starts (kube-router does it at
// its next sync), so a real service's migration must retry its first
// connection too (charts/README.md).
func migrate(ctx context.Context, svc *refservice.Service, to string, log *slog.Logger) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := svc.Migrate(ctx, to)
		if err == nil || !refused(err) || time.Now().After(deadline) {
			return err
		}
		log.Warn("a database refused the connection; retrying in 2 s", "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Second):
		}
	}
}

func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused")
}
