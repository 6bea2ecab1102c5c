package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func envOf(m map[string]string) func(string) (string, error) {
	return func(k string) (string, error) { return m[k], nil }
}

// The mongodb chart's default arguments and root user become FerretDB's
// flags; the password goes to the environment only.
func TestTranslateTheChartsArguments(t *testing.T) {
	argv, env, err := translate([]string{"--bind_ip_all", "--auth", "--wiredTigerCacheSizeGB", "0.25"},
		envOf(map[string]string{"MONGO_INITDB_ROOT_USERNAME": "admin", "MONGO_INITDB_ROOT_PASSWORD": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ferretdb, "--handler=sqlite", "--sqlite-url=file:/data/db/", "--state-dir=/data/db",
		"--listen-addr=0.0.0.0:27017", "--telemetry=disable", "--setup-database=admin", "--test-enable-new-auth"}
	if !slices.Equal(argv, want) {
		t.Errorf("argv = %q\nwant   %q", argv, want)
	}
	if !slices.Equal(env, []string{"FERRETDB_SETUP_USERNAME=admin", "FERRETDB_SETUP_PASSWORD=s3cret"}) {
		t.Errorf("env = %q", env)
	}
	if strings.Contains(strings.Join(argv, " "), "s3cret") {
		t.Error("the password is on the command line")
	}
}

func TestTranslateForms(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want []string // flags that must be there
		not  []string // flags that must not
	}{
		{args: nil, want: []string{"--listen-addr=127.0.0.1:27017"}, not: []string{"--test-enable-new-auth", "--setup-database=admin"}},
		{args: []string{"--bind_ip=localhost,10.0.0.1", "--port=27018"}, want: []string{"--listen-addr=127.0.0.1:27018"}},
		{args: []string{"--bind_ip", "::", "--port", "1"}, want: []string{"--listen-addr=[::]:1"}},
		{args: []string{"--dbpath", "/var/lib/mongo/"}, want: []string{"--sqlite-url=file:/var/lib/mongo/", "--state-dir=/var/lib/mongo"}},
		{args: []string{"--auth"}, want: []string{"--test-enable-new-auth"}, not: []string{"--setup-database=admin"}},
		// A root user means authentication, even with --noauth before.
		{args: []string{"--noauth"}, env: map[string]string{"MONGO_INITDB_ROOT_USERNAME": "a", "MONGO_INITDB_ROOT_PASSWORD": "b"},
			want: []string{"--test-enable-new-auth", "--setup-database=admin"}},
		{args: []string{"--quiet", "--oplogSize", "64", "--nounixsocket"}, want: []string{"--listen-addr=127.0.0.1:27017"}},
	} {
		argv, _, err := translate(tc.args, envOf(tc.env))
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		for _, w := range tc.want {
			if !slices.Contains(argv, w) {
				t.Errorf("%q: %q lacks %s", tc.args, argv, w)
			}
		}
		for _, n := range tc.not {
			if slices.Contains(argv, n) {
				t.Errorf("%q: %q has %s", tc.args, argv, n)
			}
		}
	}
}

func TestTranslateRefusesWhatItCannotHonour(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--replSet", "rs0"}, want: `"--replSet" is not supported`},
		{args: []string{"--config", "/etc/mongod.conf"}, want: "not supported"},
		{args: []string{"--port", "70000"}, want: "not a TCP port"},
		{args: []string{"--port"}, want: "needs a value"},
		{args: []string{"--bind_ip"}, want: "needs a value"},
		{args: []string{"--dbpath="}, want: "--dbpath is empty"},
		{env: map[string]string{"MONGO_INITDB_ROOT_USERNAME": "a"}, want: "set both"},
		{env: map[string]string{"MONGO_INITDB_ROOT_PASSWORD": "b"}, want: "set both"},
	} {
		_, _, err := translate(tc.args, envOf(tc.env))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: err = %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
	_, _, err := translate(nil, func(string) (string, error) { return "", errors.New("both set") })
	if err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("an environment error was lost: %v", err)
	}
}
