//go:build linux

package platform

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"onprem.dev/onprem/installer/rotate"
)

// rotateKeys rotates the platform's signing and encryption keys while
// clients read records through the ingress controller and, through
// pipelines-api, have a token signed and checked (the ingress controller
// may send the two requests to different pods, one restarted and one
// not), and check a token signed before the rotation: no request may
// fail. Then the old keys are retired: the token and a value sealed
// before the rotation are refused, a new token is accepted.
func (e *env) rotateKeys(ctx context.Context, paths []string) {
	t := e.t
	const prefix = "/api" // pipelines-api, which has keys
	e.step("signing and encryption keys rotated under traffic (rotate keys), then the old ones retired (--retire)", func() {
		var tok struct{ Token string }
		decodeJSON(t, e.request(http.MethodPost, prefix+"/tokens", "", http.StatusOK), &tok)
		var sealed struct{ Sealed string }
		decodeJSON(t, e.request(http.MethodPost, prefix+"/sealed", "sealed before the rotation", http.StatusOK), &sealed)

		tokens := e.startTokenTraffic(ctx, prefix, tok.Token)
		var res rotate.KeysResult
		r := e.underTraffic("keys rotated", func() {
			e.onpremJSON(&res, "rotate", "keys", "--namespace", namespace, "--kubeconfig", e.kubeconfig, "--timeout", "4m")
		}, paths...)
		tr := tokens.stop("keys rotated (tokens signed and checked through pipelines-api)")
		e.timing.traffic = append(e.timing.traffic, tr)
		t.Logf("tokens during the rotation: %s", tr)
		for _, res := range []trafficResult{r, tr} {
			if res.Failed > 0 || res.Sent == 0 {
				t.Fatalf("%s: %d of %d requests failed: %v", res.Operation, res.Failed, res.Sent, res.Examples)
			}
		}
		if !res.Changed || res.RingAfter != 2 || len(res.Restarted) == 0 {
			t.Fatalf("rotate keys: %+v", res)
		}
		t.Logf("keys rotated: %d keys in each ring; restarted %v", res.RingAfter, res.Restarted)
		e.request(http.MethodGet, prefix+"/tokens/"+tok.Token, "", http.StatusOK)
		if got := e.request(http.MethodGet, prefix+"/sealed/"+sealed.Sealed, "", http.StatusOK); !strings.Contains(string(got), "sealed before the rotation") {
			t.Fatalf("the value sealed before the rotation opens as %s", got)
		}

		var retired rotate.KeysResult
		e.onpremJSON(&retired, "rotate", "keys", "--retire", "--namespace", namespace, "--kubeconfig", e.kubeconfig, "--timeout", "4m")
		if !retired.Changed || retired.RingAfter != 1 {
			t.Fatalf("rotate keys --retire: %+v", retired)
		}
		e.request(http.MethodGet, prefix+"/tokens/"+tok.Token, "", http.StatusUnauthorized)
		e.request(http.MethodGet, prefix+"/sealed/"+sealed.Sealed, "", http.StatusUnauthorized)
		decodeJSON(t, e.request(http.MethodPost, prefix+"/tokens", "", http.StatusOK), &tok)
		e.request(http.MethodGet, prefix+"/tokens/"+tok.Token, "", http.StatusOK)
		t.Log("after --retire: the token and the value of the old keys are refused, a new token is accepted")
	})
}

// startTokenTraffic, at trafficRate/2 until stop, has prefix's service
// sign a token and checks it, and checks old (a token signed before):
// each of the three requests counts.
func (e *env) startTokenTraffic(ctx context.Context, prefix, old string) *traffic {
	ctx, cancel := context.WithCancel(ctx)
	tr := &traffic{cancel: cancel, done: make(chan struct{}), started: time.Now()}
	client := &http.Client{Timeout: 5 * time.Second, Transport: e.client.Transport}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(2 * time.Second / trafficRate)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var tok struct{ Token string }
			err := call(client, http.MethodPost, prefix+"/tokens", &tok)
			if ctx.Err() != nil {
				return
			}
			tr.record(prefix+"/tokens (sign)", err)
			if err == nil {
				tr.record(prefix+"/tokens/NEW (check)", call(client, http.MethodGet, prefix+"/tokens/"+tok.Token, nil))
			}
			tr.record(prefix+"/tokens/OLD (check)", call(client, http.MethodGet, prefix+"/tokens/"+old, nil))
		}
	}()
	return tr
}

// call sends one request through the ingress controller and decodes the
// answer into v (when not nil); anything but 200 is an error.
func call(client *http.Client, method, path string, v any) error {
	req, err := http.NewRequest(method, "https://"+domain+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if v != nil {
		return json.Unmarshal(body, v)
	}
	return nil
}
