// Package quote puts what an operator gave (a field's value, an argument,
// a variable) into a message without echoing it whole: a value of any size
// comes out as at most a short quoted prefix and its length, so that a
// mistake of 50 MB costs a line of output, not 50 MB of it.
package quote

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Max is how many bytes of a value a message quotes.
const Max = 64

// Value is s quoted as %q does when it is at most Max bytes long; longer,
// its first bytes quoted (cut at a character boundary), then "..." and
// its length: "aaaa..."... (52428800 bytes).
func Value(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	return strconv.Quote(prefix(s, Max)) + fmt.Sprintf("... (%d bytes)", len(s))
}

// Text is s when it is at most Max bytes long; longer, its first bytes,
// then "..." and its length, unquoted: for a value shown as it would be
// written (set host: registry.internal).
func Text(s string) string {
	if len(s) <= Max {
		return s
	}
	return prefix(s, Max) + fmt.Sprintf("... (%d bytes)", len(s))
}

// prefix is at most n bytes of s, cut at a character boundary.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Arg wraps a value for a format string: with %q it prints as Value does;
// with %s and %v as the text itself, at most MaxLine bytes of it.
type Arg string

// Format implements fmt.Formatter.
func (a Arg) Format(f fmt.State, verb rune) {
	switch verb {
	case 'q':
		_, _ = f.Write([]byte(Value(string(a))))
	default:
		_, _ = f.Write([]byte(Line(string(a))))
	}
}

// Args wraps every string of args as an Arg (other values are left alone).
func Args(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(string); ok {
			out[i] = Arg(s)
		} else {
			out[i] = a
		}
	}
	return out
}

// MaxLine is how long one line of a message may be.
const MaxLine = 4096

// Line is s cut to MaxLine bytes, saying how much was left out.
func Line(s string) string {
	if len(s) <= MaxLine {
		return s
	}
	return prefix(s, MaxLine) + fmt.Sprintf("... (%d more bytes)", len(s)-len(prefix(s, MaxLine)))
}

// MaxLines is how many lines a message may have.
const MaxLines = 500

// Message bounds a whole message for a terminal, whatever produced it (a
// library's error that quotes a value whole, say): every double-quoted
// string longer than Max is shortened as Value shortens it, every line cut
// to MaxLine bytes, and the message to MaxLines lines. It is linear in the
// size of msg.
func Message(msg string) string {
	if len(msg) <= Max {
		return msg
	}
	var b strings.Builder
	lines := 0
	for len(msg) > 0 {
		line, rest, more := strings.Cut(msg, "\n")
		msg = rest
		if lines == MaxLines {
			n := strings.Count(msg, "\n") + 1
			if !more {
				n = 1
			}
			fmt.Fprintf(&b, "... (%d more lines)", n)
			break
		}
		if lines > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(Line(shortenQuoted(line)))
		lines++
		if !more {
			break
		}
	}
	return b.String()
}

// shortenQuoted shortens every double-quoted string of one line that is
// longer than Max. A quote without its closing one is left as it is.
func shortenQuoted(line string) string {
	if len(line) <= Max {
		return line
	}
	var b strings.Builder
	for {
		open := strings.IndexByte(line, '"')
		if open < 0 {
			b.WriteString(line)
			return b.String()
		}
		end := closing(line, open+1)
		if end < 0 {
			b.WriteString(line)
			return b.String()
		}
		b.WriteString(line[:open])
		quoted := line[open : end+1]
		if len(quoted) > Max+2 {
			inner := quoted[1 : len(quoted)-1]
			if u, err := strconv.Unquote(quoted); err == nil {
				b.WriteString(Value(u))
			} else {
				b.WriteString(`"` + prefix(inner, Max) + fmt.Sprintf(`"... (%d bytes)`, len(inner)))
			}
		} else {
			b.WriteString(quoted)
		}
		line = line[end+1:]
	}
}

// closing is the index of the double quote that closes the string opened
// before i (skipping escaped characters), or -1.
func closing(s string, i int) int {
	for ; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}
