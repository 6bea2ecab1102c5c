// Package cmdout trims what the test rings' commands (go build, docker,
// kind, debootstrap) print down to what an error message or a progress
// line can carry: the last lines of the output, a command line cut short.
// Both harnesses that run such commands (e2e/images, e2e/kindcluster,
// e2e/testcluster) use it.
package cmdout

import (
	"strings"
	"sync"
)

// Tail returns the last n lines of b (a trailing newline ignored), after a
// line "..." when lines were left out.
func Tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// Shorten returns s cut to n bytes, with "..." when it was cut.
func Shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// tailBufferSize is how much of the output a TailBuffer keeps.
const tailBufferSize = 64 << 10

// TailBuffer is an io.Writer that keeps the last 64 KiB written to it,
// for a command's stdout and stderr at once (it is safe for concurrent
// writes).
type TailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *TailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailBufferSize {
		t.b = t.b[len(t.b)-tailBufferSize:]
	}
	return len(p), nil
}

// Tail returns the last n lines kept (see Tail).
func (t *TailBuffer) Tail(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Tail(t.b, n)
}
