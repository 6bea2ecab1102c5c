package local

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	kindlog "sigs.k8s.io/kind/pkg/log"
)

// provider is the part of kind's *cluster.Provider that Up and Down use.
type provider interface {
	List() ([]string, error)
	Create(name string, options ...cluster.CreateOption) error
	Delete(name, explicitKubeconfigPath string) error
	ListInternalNodes(name string) ([]nodes.Node, error)
}

// connectFunc checks docker and returns kind's provider, and whether the
// docker daemon runs containers on cgroup v1.
type connectFunc func(ctx context.Context, log *slog.Logger) (provider, bool, error)

// connectKind is connectFunc with docker and kind's docker provider.
func connectKind(ctx context.Context, log *slog.Logger) (provider, bool, error) {
	cgroup, err := dockerInfo(ctx)
	if err != nil {
		return nil, false, err
	}
	log.Debug("local: docker answers", "cgroupVersion", cgroup)
	p := cluster.NewProvider(cluster.ProviderWithLogger(kindLogger{log}), cluster.ProviderWithDocker())
	return p, cgroup == "1", nil
}

// kindLogger writes kind's messages to slog: its user-facing status lines
// (V(0)) at Info, its debug levels at Debug.
type kindLogger struct{ l *slog.Logger }

func (k kindLogger) Warn(message string) { k.l.Warn("kind: " + clean(message)) }
func (k kindLogger) Warnf(format string, args ...any) {
	k.l.Warn("kind: " + clean(fmt.Sprintf(format, args...)))
}
func (k kindLogger) Error(message string) { k.l.Error("kind: " + clean(message)) }
func (k kindLogger) Errorf(format string, args ...any) {
	k.l.Error("kind: " + clean(fmt.Sprintf(format, args...)))
}
func (k kindLogger) V(level kindlog.Level) kindlog.InfoLogger {
	if level <= 0 {
		return kindInfo{k.l, slog.LevelInfo}
	}
	return kindInfo{k.l, slog.LevelDebug}
}

type kindInfo struct {
	l     *slog.Logger
	level slog.Level
}

func (k kindInfo) Info(message string) { k.log(message) }
func (k kindInfo) Infof(format string, args ...any) {
	k.log(fmt.Sprintf(format, args...))
}
func (k kindInfo) Enabled() bool { return k.l.Enabled(context.Background(), k.level) }

func (k kindInfo) log(msg string) {
	msg = clean(msg)
	if msg == "" {
		return
	}
	level := k.level
	if strings.HasSuffix(msg, "...") {
		// A step starting: the line saying it is done follows.
		level = slog.LevelDebug
	}
	k.l.Log(context.Background(), level, "kind: "+msg)
}

// clean trims kind's status decorations (" ✓ Ensuring node image ...\n").
func clean(s string) string {
	s = strings.TrimSpace(s)
	for _, p := range []string{"✓", "✗", "•"} {
		s = strings.TrimSpace(strings.TrimPrefix(s, p))
	}
	return s
}
