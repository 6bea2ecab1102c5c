//go:build unix

package fsutil

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func init() { lockPoll = 20 * time.Millisecond }

func TestLockExcludesASecondHolderInThisProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	unlock, err := Lock(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var waited atomic.Int32
	got := make(chan error, 1)
	var unlock2 func()
	go func() {
		var err error
		unlock2, err = Lock(context.Background(), path, func() { waited.Add(1) })
		got <- err
	}()
	// The second holder says it waits (however slowly the machine
	// schedules it), and keeps waiting.
	for deadline := time.Now().Add(10 * time.Second); waited.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-got:
		t.Fatalf("a second holder got the lock while the first held it (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if waited.Load() != 1 {
		t.Errorf("waiting was called %d times in the first minute, want once", waited.Load())
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		unlock2()
	case <-time.After(5 * time.Second):
		t.Fatal("the second holder did not get the lock after the first released it")
	}
}

func TestLockRespectsContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	unlock, err := Lock(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := Lock(ctx, path, nil)
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock kept waiting after its context was cancelled")
	}

	// A context already done with the lock free still takes it: the lock
	// is tried before the context is looked at.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	unlock()
	u, err := Lock(done, path, nil)
	if err != nil {
		t.Fatalf("a free lock with a done context: %v", err)
	}
	u()
}

func TestLockErrorNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", ".lock")
	_, err := Lock(context.Background(), path, nil)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Lock in a missing folder: %v, want a not-exist error", err)
	}
	if want := "lock " + path + ": "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Errorf("error %q does not start with %q", err, want)
	}
}

// holdLockEnv makes the test binary a helper process that holds a lock
// (see TestLockExcludesAnotherProcess).
const holdLockEnv = "FSUTIL_TEST_HOLD_LOCK"

func TestMain(m *testing.M) {
	if path := os.Getenv(holdLockEnv); path != "" {
		unlock, err := Lock(context.Background(), path, nil)
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(2)
		}
		os.Stdout.WriteString("locked\n")
		// Hold the lock until the parent closes stdin.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		unlock()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestLockExcludesAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holdLockEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("the helper process did not take the lock: %q, %v", line, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	waited := false
	if _, err := Lock(ctx, path, func() { waited = true }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while another process holds it: %v, want a deadline error", err)
	}
	if !waited {
		t.Error("Lock did not say it was waiting")
	}

	// The lock is free once the other process lets go.
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper process: %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	unlock, err := Lock(ctx2, path, nil)
	if err != nil {
		t.Fatalf("Lock after the other process exited: %v", err)
	}
	unlock()
}
