package bundle

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Progress is a snapshot of a long operation (create, verify, push).
type Progress struct {
	// Op is "create", "verify" or "push".
	Op string `json:"op"`
	// Item is what is being worked on (an image name or a blob).
	Item string `json:"item,omitempty"`
	// Done counts the bytes dealt with, of Total (0: not known yet).
	// Blobs that a registry already has count as done.
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// Transferred counts the bytes actually read or sent.
	Transferred int64         `json:"transferred"`
	Elapsed     time.Duration `json:"elapsed"`
	// Final is set on the last report of the operation.
	Final bool `json:"final,omitempty"`
}

// Rate is the average transfer rate in bytes per second.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Transferred) / p.Elapsed.Seconds()
}

// String is a one-line human summary:
// "push: 120.0 MiB / 300.0 MiB (40%), 55.2 MiB/s".
func (p Progress) String() string {
	s := p.Op + ": " + formatBytes(p.Done)
	if p.Total > 0 {
		s += fmt.Sprintf(" / %s (%d%%)", formatBytes(p.Total), p.Done*100/p.Total)
	}
	s += fmt.Sprintf(", %s/s", formatBytes(int64(p.Rate())))
	if p.Final {
		s += fmt.Sprintf(", done in %s", p.Elapsed.Round(100*time.Millisecond))
	} else if p.Item != "" {
		s += " " + p.Item
	}
	return s
}

// ProgressFunc receives progress reports. It is called from one goroutine
// at a time, at most every half second and once at the end.
type ProgressFunc func(Progress)

// ProgressTo returns a ProgressFunc that writes a line to w (stderr, for
// people) at most every interval (default 2s), and the final line.
func ProgressTo(w io.Writer, interval time.Duration) ProgressFunc {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	var last time.Time
	return func(p Progress) {
		now := time.Now()
		if !p.Final && now.Sub(last) < interval {
			return
		}
		last = now
		fmt.Fprintln(w, p.String())
	}
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// meter counts bytes for an operation and reports to a ProgressFunc.
type meter struct {
	op          string
	fn          ProgressFunc
	start       time.Time
	total       atomic.Int64
	done        atomic.Int64
	transferred atomic.Int64

	mu   sync.Mutex
	last time.Time
	item string
}

const progressInterval = 500 * time.Millisecond

func newMeter(op string, fn ProgressFunc) *meter {
	return &meter{op: op, fn: fn, start: time.Now()}
}

func (m *meter) snapshot(final bool) Progress {
	return Progress{
		Op: m.op, Item: m.item, Done: m.done.Load(), Total: m.total.Load(),
		Transferred: m.transferred.Load(), Elapsed: time.Since(m.start), Final: final,
	}
}

// setItem names what is being worked on now.
func (m *meter) setItem(item string) {
	m.mu.Lock()
	m.item = item
	m.mu.Unlock()
	m.tick()
}

// moved counts n bytes transferred (and done).
func (m *meter) moved(n int64) {
	m.transferred.Add(n)
	m.done.Add(n)
	m.tick()
}

// skipped counts n bytes as done without moving them.
func (m *meter) skipped(n int64) {
	m.done.Add(n)
	m.tick()
}

func (m *meter) tick() {
	if m.fn == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.last) < progressInterval {
		return
	}
	m.last = time.Now()
	m.fn(m.snapshot(false))
}

// finish sends the final report.
func (m *meter) finish() {
	if m.fn == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.item = ""
	m.fn(m.snapshot(true))
}

// meterReader counts what is read through it and stops when ctx is done.
type meterReader struct {
	ctx context.Context
	r   io.Reader
	m   *meter
	n   int64
}

func (r *meterReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(p)
	if n > 0 {
		r.n += int64(n)
		if r.m != nil {
			r.m.moved(int64(n))
		}
	}
	return n, err
}
