// Package bounded runs one function over many items with a bound on how
// many calls run at once: registry requests, image catalogues.
package bounded

import (
	"context"
	"sync"
)

// Each calls fn(i) for i from 0 to n-1, in order, at most limit calls at
// a time (at least one), and returns once every call it started has
// returned. Once ctx is done it starts no further call and returns ctx's
// error: the items it did not call are the caller's to treat as not done.
func Each(ctx context.Context, n, limit int, fn func(i int)) error {
	slots := make(chan struct{}, max(1, limit))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			<-slots
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			fn(i)
		}()
	}
	return nil
}
