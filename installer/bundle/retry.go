package bundle

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// retryPolicy retries transient registry errors with exponential backoff.
type retryPolicy struct {
	attempts int           // total attempts (>= 1)
	initial  time.Duration // first delay, doubled each time
	max      time.Duration // cap of a delay
}

// do runs op until it succeeds, fails permanently, or attempts run out.
// It returns the number of retries made.
func (p retryPolicy) do(ctx context.Context, op func() error) (int, error) {
	delay := p.initial
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil {
			return attempt - 1, nil
		}
		if ctx.Err() != nil {
			return attempt - 1, ctx.Err()
		}
		if attempt >= p.attempts || !transient(err) {
			return attempt - 1, err
		}
		// Full jitter in [delay/2, delay): retries of parallel uploads
		// do not hit a recovering registry all at once.
		d := delay/2 + rand.N(delay/2+1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempt - 1, ctx.Err()
		case <-t.C:
		}
		delay *= 2
		if delay > p.max {
			delay = p.max
		}
	}
}

// transient says whether an error may go away by itself: server errors
// (5xx), throttling (429), request timeouts (408), connection resets and
// refusals, timeouts and cut-off bodies. Authentication failures,
// cancellation and other client errors are not.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ae *AuthError
	if errors.As(err, &ae) {
		return false
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch {
		case te.StatusCode >= 500, te.StatusCode == http.StatusTooManyRequests, te.StatusCode == http.StatusRequestTimeout:
			return true
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}
