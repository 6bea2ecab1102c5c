//go:build linux

package console_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"onprem.dev/onprem/installer/console"
	"onprem.dev/onprem/internal/fsutil"
)

// serve starts a console of src on a free loopback port for the test and
// returns its login URL and its base URL; the console stops at cleanup.
func serve(t *testing.T, src console.Source) (login string, base *url.URL) {
	t.Helper()
	sctx, stop := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- console.Serve(sctx, console.ServeOptions{Source: src, Listen: "127.0.0.1:0", Ready: func(u string) { urls <- u }})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("console: %v", err)
		}
	})
	select {
	case login = <-urls:
	case err := <-served:
		t.Fatalf("console: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the console did not start")
	}
	base, _ = url.Parse(login)
	base.Path, base.RawQuery = "", ""
	return login, base
}

// browser starts headless Chromium (the binary chrome) for the test and
// returns its context, which ends after timeout.
func browser(t *testing.T, chrome string, timeout time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	bctx, cancelTimeout := context.WithTimeout(bctx, timeout)
	t.Cleanup(cancelTimeout)
	return bctx
}

// artifacts is where the browser tests keep their screenshots:
// $ONPREM_CACHE/artifacts/console (default /var/cache/onprem).
func artifacts(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(fsutil.CacheRoot(), "artifacts", "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs one browser action that returns a value, failing the test on
// an error.
func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
