//go:build linux

// Command demo-images prepares 'make demo' on a machine with no registry:
// it builds (or finds in the caches) the offline kind node image and the
// platform's images, writes them as one docker-archive, and prints on
// stdout, one per line:
//
//	node-image=onprem.dev/kind-node:v1.36.3
//	image-archive=/var/cache/onprem/localdemo/platform-images.tar
//	stand-ins=what the images really are
//
// Progress, and what the images really are, go to stderr. See
// e2e/localdemo.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"onprem.dev/onprem/e2e/localdemo"
)

func main() {
	var o localdemo.Options
	flag.StringVar(&o.Archive, "archive", "", "where to write the image archive (default: $ONPREM_CACHE/localdemo/platform-images.tar)")
	flag.StringVar(&o.PlatformImages, "platform-images", "", "spec.images.platform the images are named under (default: onprem's default)")
	flag.Parse()
	o.Log = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := localdemo.Prepare(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-images:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "\nNOTE: %s.\n", localdemo.StandIns)
	if len(res.Missing) > 0 {
		fmt.Fprintf(os.Stderr, "NOTE: no offline image for %s: leave them off (the default configuration does).\n\n", strings.Join(res.Missing, ", "))
	}
	fmt.Printf("node-image=%s\nimage-archive=%s\nstand-ins=%s\n", res.NodeImage, res.Archive, localdemo.StandIns)
}
