// Command pause is the pod sandbox's process in the kind node image, a
// stand-in for registry.k8s.io/pause built from source: it reaps the
// zombies it inherits as PID 1 of the pod and exits on SIGINT or SIGTERM.
// The kindcluster harness embeds this file and builds it in a module of its
// own in its cache.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
