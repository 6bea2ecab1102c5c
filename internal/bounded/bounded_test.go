package bounded

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every item is called once, never more than limit at a time, and Each
// returns only after the last call has.
func TestEachBoundsAndWaits(t *testing.T) {
	var running, most, calls atomic.Int32
	seen := make([]int32, 50)
	err := Each(context.Background(), len(seen), 4, func(i int) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		atomic.AddInt32(&seen[i], 1)
		calls.Add(1)
		running.Add(-1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 50 || running.Load() != 0 {
		t.Fatalf("%d calls, %d still running after Each returned", calls.Load(), running.Load())
	}
	for i, s := range seen {
		if s != 1 {
			t.Errorf("item %d called %d times", i, s)
		}
	}
	if m := most.Load(); m > 4 || m < 2 {
		t.Errorf("at most %d ran at once, want 2 to 4", m)
	}
	if err := Each(context.Background(), 3, 0, func(int) {}); err != nil {
		t.Errorf("limit 0: %v", err)
	}
}

// Once the context ends no call starts; Each says so, and what was
// started has ended when it returns.
func TestEachStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var called []int
	err := Each(ctx, 100, 2, func(i int) {
		mu.Lock()
		called = append(called, i)
		mu.Unlock()
		if i == 3 {
			cancel()
		}
		time.Sleep(time.Millisecond)
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Each after cancel: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(called) > 6 || len(called) < 4 {
		t.Errorf("%d items called after the context ended at the fourth: %v", len(called), called)
	}
}
