package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestLocalHelpTeaches(t *testing.T) {
	for args, want := range map[string][]string{
		"local --help":      {"local up", "local down", "docker"},
		"local up --help":   {"Example", "onprem.localhost:8443", "--image-archive", "--node-image", "make demo", "--kind-config", "-o json", "~/.onprem/local", "Exit codes"},
		"local down --help": {"Example", "--name", "already gone"},
	} {
		code, stdout, _ := cli(t, t.TempDir(), strings.Fields(args)...)
		if code != 0 {
			t.Errorf("%s: exit %d", args, code)
		}
		for _, w := range want {
			if !strings.Contains(stdout, w) {
				t.Errorf("%s lacks %q", args, w)
			}
		}
	}
}

func TestLocalBadInputExitsTwo(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "images.tar")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"local", "up", "--image-archive", missing}, []string{"--image-archive", missing, "no such file"}},
		{[]string{"local", "up", "-c", filepath.Join(dir, "onprem.yaml")}, []string{"--config", "onprem.yaml"}},
		{[]string{"local", "up", "--name", "Not_Valid"}, []string{"--name", "Not_Valid"}},
		{[]string{"local", "up", "--http-port", "8443"}, []string{"--http-port", "--https-port", "8443"}},
		{[]string{"local", "up", "-o", "xml"}, []string{"-o xml", "table, json, yaml"}},
		{[]string{"local", "down", "--name", "../etc"}, []string{"--name", "../etc"}},
		{[]string{"local", "down", "extra"}, []string{"extra"}},
	} {
		code, _, stderr := cli(t, dir, c.args...)
		if code != exitInput {
			t.Errorf("%v: exit %d, want %d: %s", c.args, code, exitInput, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr lacks %q: %s", c.args, w, stderr)
			}
		}
	}
}
