package testcluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A component that dies of its known crash (kwok's race) is started
// again while the cluster runs, up to maxRestarts times; one that dies of
// anything else, or once the restarts are spent, is reported as exited.
func TestKnownCrashRestarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		// crashes: how many starts print the known crash and exit.
		crashes      int
		other        bool // exits with another error instead
		wantRunning  bool
		wantRestarts int
	}{
		{name: "one crash", crashes: 1, wantRunning: true, wantRestarts: 1},
		{name: "every start crashes", crashes: maxRestarts + 1, wantRestarts: maxRestarts},
		{name: "another failure", other: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
				t.Fatal(err)
			}
			c := &Cluster{Name: "restart", Dir: dir, tb: t, cfg: config{stopGrace: time.Second}}
			t.Cleanup(func() { _ = c.stop(false) })
			count := filepath.Join(dir, "starts")
			// Each start appends a line to count; the first tc.crashes
			// starts crash. (The crash's text is an argument, so it is on
			// the log's first line too: the command, which is no crash.)
			script := `echo x >> "$1"; n=$(wc -l < "$1"); ` +
				`if [ "$2" = other ]; then echo "no config" >&2; exit 1; fi; ` +
				`if [ "$n" -le "$3" ]; then echo "$4" >&2; exit 2; fi; ` +
				`exec sleep 60`
			other := "crash"
			if tc.other {
				other = "other"
			}
			if err := c.spawnWith("fake", kwokRace, "/bin/sh", "-c", script, "fake", count, other, strconv.Itoa(tc.crashes), kwokRace); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				b, _ := os.ReadFile(count)
				starts := strings.Count(string(b), "x")
				if c.exited() != nil || (tc.wantRunning && starts == tc.wantRestarts+1) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // a wrong restart would show now
			b, _ := os.ReadFile(count)
			starts := strings.Count(string(b), "x")
			if starts != tc.wantRestarts+1 {
				t.Errorf("%d starts, want %d", starts, tc.wantRestarts+1)
			}
			if running := c.exited() == nil; running != tc.wantRunning {
				t.Errorf("running = %v, want %v; log:\n%s", running, tc.wantRunning, c.logTail("fake"))
			}
		})
	}
}
