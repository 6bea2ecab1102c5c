package quote

import (
	"fmt"
	"strings"
	"testing"
)

func TestValue(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `""`},
		{"ci.example.com", `"ci.example.com"`},
		{strings.Repeat("a", Max), `"` + strings.Repeat("a", Max) + `"`},
		{strings.Repeat("a", 50<<20), `"` + strings.Repeat("a", Max) + `"... (52428800 bytes)`},
		// Cut at a character boundary: é is two bytes.
		{strings.Repeat("é", 40), `"` + strings.Repeat("é", Max/2) + `"... (80 bytes)`},
		{"a\"b\n", `"a\"b\n"`},
	} {
		if got := Value(c.in); got != c.want {
			t.Errorf("Value(%.80q) = %s, want %s", c.in, got, c.want)
		}
	}
	if got := Text(strings.Repeat("x", 100)); got != strings.Repeat("x", Max)+"... (100 bytes)" {
		t.Errorf("Text = %s", got)
	}
}

func TestArgs(t *testing.T) {
	huge := strings.Repeat("z", 1<<20)
	got := fmt.Sprintf("%q is bad; %s; %d", Args([]any{huge, "short", 3})...)
	if want := `"` + strings.Repeat("z", Max) + `"... (1048576 bytes) is bad; short; 3`; got != want {
		t.Errorf("got %.200s", got)
	}
	if got := fmt.Sprintf("%s", Args([]any{huge})...); len(got) > MaxLine+64 {
		t.Errorf("%%s of a huge value: %d bytes", len(got))
	}
}

// Message bounds what a library's error may say: long quoted strings, long
// lines and many lines.
func TestMessage(t *testing.T) {
	huge := strings.Repeat("v", 1<<20)
	for _, c := range []struct {
		name, in string
		max      int
		has      []string
	}{
		{"short stays", `unknown command "x" for "onprem"`, 100, []string{`unknown command "x" for "onprem"`}},
		{"quoted value", `invalid argument "` + huge + `" for "--concurrency" flag: strconv.ParseInt: parsing "` + huge + `": invalid syntax`, 400,
			[]string{`invalid argument "vvvv`, `"... (1048576 bytes) for "--concurrency" flag`, "invalid syntax"}},
		{"escaped quotes", `bad "` + strings.Repeat(`a\"`, 100) + `" here`, 200, []string{`bad "a\"a\"`, `here`}},
		{"unquoted line", "value " + huge, MaxLine + 100, []string{"more bytes)"}},
		{"many lines", strings.Repeat("problem\n", 10000), MaxLines*8 + 100, []string{"more lines)"}},
		{"unterminated quote", `say "` + huge, MaxLine + 100, []string{`say "vvv`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Message(c.in)
			if len(got) > c.max {
				t.Errorf("%d bytes, want at most %d: %.300s", len(got), c.max, got)
			}
			for _, h := range c.has {
				if !strings.Contains(got, h) {
					t.Errorf("lacks %q: %.300s", h, got)
				}
			}
		})
	}
}
