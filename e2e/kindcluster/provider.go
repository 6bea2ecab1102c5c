package kindcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"sigs.k8s.io/kind/pkg/cluster"
	kindlog "sigs.k8s.io/kind/pkg/log"
)

// The harness drives kind through its Go library (sigs.k8s.io/kind
// pkg/cluster, the same version as the CLI it builds for operators'
// inspection commands): one Provider per cluster, on docker.

var pathOnce sync.Once

// provider returns kind's docker provider. kind runs the docker CLI found
// on PATH, so the toolchain's docker goes first there (once per process).
// Its messages go to logf, and the last of them are kept for errors.
func (c *Cluster) provider() (*cluster.Provider, *kindLog) {
	pathOnce.Do(func() {
		dir := filepath.Dir(c.Toolchain.Docker)
		if c.Toolchain.Docker != "" && !slices.Contains(filepath.SplitList(os.Getenv("PATH")), dir) {
			os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		}
	})
	l := &kindLog{logf: c.logf}
	return cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(l)), l
}

// kindLog is kind's logger: status lines to logf (when set), the last
// lines kept so that a failure can show them.
type kindLog struct {
	mu   sync.Mutex
	logf func(string, ...any)
	last []string
}

func (l *kindLog) add(msg string) {
	msg = strings.TrimSpace(strings.Trim(strings.TrimSpace(msg), "•✓✗ "))
	if msg == "" {
		return
	}
	l.mu.Lock()
	l.last = append(l.last, msg)
	if len(l.last) > 40 {
		l.last = l.last[len(l.last)-40:]
	}
	l.mu.Unlock()
	if l.logf != nil {
		l.logf("kindcluster: kind: %s", msg)
	}
}

// tail is the last lines kind logged.
func (l *kindLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.last, "\n")
}

func (l *kindLog) Warn(message string)                      { l.add(message) }
func (l *kindLog) Warnf(format string, args ...any)         { l.add(fmt.Sprintf(format, args...)) }
func (l *kindLog) Error(message string)                     { l.add(message) }
func (l *kindLog) Errorf(format string, args ...any)        { l.add(fmt.Sprintf(format, args...)) }
func (l *kindLog) V(level kindlog.Level) kindlog.InfoLogger { return kindInfo{l, level <= 1} }

type kindInfo struct {
	l  *kindLog
	on bool
}

func (k kindInfo) Info(message string) {
	if k.on {
		k.l.add(message)
	}
}

func (k kindInfo) Infof(format string, args ...any) {
	if k.on {
		k.l.add(fmt.Sprintf(format, args...))
	}
}

func (k kindInfo) Enabled() bool { return k.on }
