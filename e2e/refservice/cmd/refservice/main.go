// Command refservice is the e2e ring's reference service (see package
// refservice): `refservice` serves, `refservice migrate --to VERSION` plays
// a release's migration and exits 1 if it fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
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
		if err := svc.Migrate(mctx, *to); err != nil {
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
