package output

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestCheckAndEncode(t *testing.T) {
	if err := Check("json", Table, JSON); err != nil {
		t.Error(err)
	}
	if err := Check("xml", Table, JSON); err == nil || !strings.Contains(err.Error(), "table, json") {
		t.Errorf("err = %v", err)
	}
	v := map[string]any{"b": 1, "a": []string{"x"}}
	var j, y bytes.Buffer
	if err := Encode(&j, JSON, v); err != nil || j.String() != "{\n  \"a\": [\n    \"x\"\n  ],\n  \"b\": 1\n}\n" {
		t.Errorf("json = %q, %v", j.String(), err)
	}
	if err := Encode(&y, YAML, v); err != nil || y.String() != "a:\n- x\nb: 1\n" {
		t.Errorf("yaml = %q, %v", y.String(), err)
	}
	if err := Encode(&y, "toml", v); err == nil {
		t.Error("unknown format accepted")
	}
}

func TestWriteEncodesForScriptsAndCallsHumanForTables(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, JSON, map[string]int{"a": 1}, func(w io.Writer) { t.Error("human called for json") }); err != nil || b.String() != "{\n  \"a\": 1\n}\n" {
		t.Errorf("%q %v", b.String(), err)
	}
	b.Reset()
	Write(&b, Table, nil, func(w io.Writer) { io.WriteString(w, "hello\n") })
	if b.String() != "hello\n" {
		t.Errorf("%q", b.String())
	}
}
