// Command echoserver is the tiny HTTP server that the kindcluster tests
// pack into an image and run in a kind cluster.
//
//	echoserver serve [-addr :8080]     answers GET / with "hello from <hostname>"
//	echoserver get URL                 prints the body of GET URL (retrying for 60 s)
//	echoserver reach URL               one GET of URL (3 s at most): exit 0 if it answered 200, 3 if not
//	echoserver write FILE TEXT         writes TEXT to FILE
//	echoserver cat FILE                prints FILE
//	echoserver sleep                   waits until it is killed
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: echoserver serve|get|write|cat|sleep ..."))
	}
	var err error
	switch args := os.Args[2:]; os.Args[1] {
	case "serve":
		err = serve(args)
	case "get":
		err = get(args)
	case "reach":
		if len(args) != 1 {
			fail(fmt.Errorf("usage: echoserver reach URL"))
		}
		if err := reach(args[0]); err != nil {
			fmt.Println("unreachable:", err)
			os.Exit(3)
		}
		fmt.Println("reached")
	case "write":
		if len(args) != 2 {
			fail(fmt.Errorf("usage: echoserver write FILE TEXT"))
		}
		err = os.WriteFile(args[0], []byte(args[1]), 0o644)
	case "cat":
		if len(args) != 1 {
			fail(fmt.Errorf("usage: echoserver cat FILE"))
		}
		var b []byte
		if b, err = os.ReadFile(args[0]); err == nil {
			_, err = os.Stdout.Write(b)
		}
	case "sleep":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "echoserver:", err)
	os.Exit(1)
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", ":8080", "listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
	})
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// get retries for a minute: the Service's DNS name and endpoints may take
// a moment to appear.
func get(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: echoserver get URL")
	}
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(args[0])
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				_, err = os.Stdout.Write(body)
				return err
			}
			err = fmt.Errorf("GET %s: %s %v", args[0], resp.Status, rerr)
		}
		if time.Now().After(deadline) {
			return err
		}
		fmt.Fprintln(os.Stderr, "retrying:", err)
		time.Sleep(2 * time.Second)
	}
}

// reach makes one GET, without retrying: a NetworkPolicy test wants to
// know whether this very connection is allowed.
func reach(url string) error {
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
