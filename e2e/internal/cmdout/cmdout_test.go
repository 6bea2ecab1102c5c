package cmdout

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 5, "a\nb\nc"},
		{"a\nb\nc\n", 3, "a\nb\nc"},
		{"a\nb\nc\n", 2, "...\nb\nc"},
		{"a\nb\nc", 1, "...\nc"},
		{"", 3, ""},
	} {
		if got := Tail([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestShorten(t *testing.T) {
	if got := Shorten("go build ./...", 100); got != "go build ./..." {
		t.Errorf("a short line was changed: %q", got)
	}
	if got := Shorten("abcdef", 3); got != "abc..." {
		t.Errorf("Shorten = %q, want abc...", got)
	}
}

// A TailBuffer keeps only the end of a long output, whole lines of it
// included, and takes concurrent writes (stdout and stderr).
func TestTailBuffer(t *testing.T) {
	var b TailBuffer
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				fmt.Fprintf(&b, "writer %d line %05d %s\n", w, i, strings.Repeat("x", 20))
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(&b, "the last line\n")
	if len(b.b) > tailBufferSize {
		t.Errorf("kept %d bytes, at most %d", len(b.b), tailBufferSize)
	}
	got := b.Tail(3)
	lines := strings.Split(got, "\n")
	if len(lines) != 4 || lines[0] != "..." || lines[3] != "the last line" {
		t.Errorf("Tail(3) = %q", got)
	}
	for _, l := range lines[1:3] {
		if !strings.HasPrefix(l, "writer ") || len(l) != len("writer 0 line 00000 ")+20 {
			t.Errorf("a torn line %q", l)
		}
	}
}
