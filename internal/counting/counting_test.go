package counting

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

type failAfter struct{ left int }

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.left {
		n := f.left
		f.left = 0
		return n, errors.New("disk full")
	}
	f.left -= len(p)
	return len(p), nil
}

// What was really written or read is counted, also when the other side
// stops part way.
func TestCounts(t *testing.T) {
	var buf bytes.Buffer
	w := &Writer{W: &buf}
	if _, err := io.Copy(w, strings.NewReader(strings.Repeat("x", 100000))); err != nil || w.N != 100000 || buf.Len() != 100000 {
		t.Fatalf("wrote %d (buffer %d): %v", w.N, buf.Len(), err)
	}
	short := &Writer{W: &failAfter{left: 10}}
	if _, err := short.Write([]byte("0123456789abcdef")); err == nil || short.N != 10 {
		t.Errorf("a write cut short counted %d, err %v; want 10 and the error", short.N, err)
	}
	r := &Reader{R: strings.NewReader("hello, world")}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "hello, world" || r.N != 12 {
		t.Errorf("read %q, counted %d: %v", got, r.N, err)
	}
}
