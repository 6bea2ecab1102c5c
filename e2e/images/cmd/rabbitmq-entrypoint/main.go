// Command rabbitmq-entrypoint is the entrypoint of the e2e RabbitMQ image
// (installed as /usr/local/bin/docker-entrypoint.sh, which the rabbitmq
// chart's command calls as `docker-entrypoint.sh rabbitmq-server`). It
// honours the part of the official rabbitmq image's contract the chart
// relies on:
//
//   - RABBITMQ_DEFAULT_USER and RABBITMQ_DEFAULT_PASS (or their _FILE
//     forms) name the user created on the first start, administrator of
//     the vhost "/" (RabbitMQ reads them itself while it has no users);
//   - HOME is the rabbitmq user's home, /var/lib/rabbitmq (the data
//     volume), where the chart puts the Erlang cookie;
//   - the configuration is /etc/rabbitmq/conf.d/*.conf (the image's
//     10-defaults.conf logs to the console only, the chart adds its
//     90-onprem.conf), the plugins those of the -management images;
//   - started as root it gives /var/lib/rabbitmq and /var/log/rabbitmq to
//     the rabbitmq user and becomes that user (the chart starts it as uid
//     999 directly).
//
// Any command other than rabbitmq-server is run as it is.
package main

import (
	"fmt"
	"os"
	"strings"

	"onprem.dev/onprem/e2e/images/internal/entry"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"rabbitmq-server"}
	}
	if args[0] != "rabbitmq-server" {
		if err := entry.Exec(args, os.Environ()); err != nil {
			entry.Fail("%v", err)
		}
	}
	if err := server(args); err != nil {
		entry.Fail("%v", err)
	}
}

func server(args []string) error {
	u, err := entry.LookupUser("rabbitmq")
	if err != nil {
		return err
	}
	if entry.IsRoot() {
		if err := entry.StepDown(u, "/var/lib/rabbitmq", "/var/log/rabbitmq"); err != nil {
			return fmt.Errorf("becoming the rabbitmq user: %w", err)
		}
	}
	if os.Getenv("HOME") == "" {
		os.Setenv("HOME", u.Home)
	}
	for _, name := range []string{"RABBITMQ_DEFAULT_USER", "RABBITMQ_DEFAULT_PASS", "RABBITMQ_DEFAULT_VHOST"} {
		v, err := entry.Env(name)
		if err != nil {
			return err
		}
		if strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("%s holds a line break, which RabbitMQ cannot take", name)
		}
		os.Unsetenv(name + "_FILE")
		if v != "" {
			os.Setenv(name, v)
		}
	}
	if (os.Getenv("RABBITMQ_DEFAULT_USER") == "") != (os.Getenv("RABBITMQ_DEFAULT_PASS") == "") {
		return fmt.Errorf("set both RABBITMQ_DEFAULT_USER and RABBITMQ_DEFAULT_PASS, or neither (then the user is guest/guest)")
	}
	return entry.Exec(args, os.Environ())
}
