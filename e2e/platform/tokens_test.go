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
)

// startTokenTraffic, at trafficRate/2 until stop, has prefix's service
// sign a token and checks it, and checks old (a token signed before):
// each of the three requests counts. The ingress controller may send the
// signing and the check to different pods, one restarted and one not.
func (e *env) startTokenTraffic(ctx context.Context, client *http.Client, prefix, old string) *traffic {
	tr, ctx := newTraffic(ctx)
	tr.run(ctx, 2*time.Second/trafficRate, false, func(ctx context.Context, _ int) {
		var tok struct{ Token string }
		err := call(client, http.MethodPost, prefix+"/tokens", "", &tok)
		if ctx.Err() != nil {
			return
		}
		tr.record(prefix+"/tokens (sign)", err)
		if err == nil {
			tr.record(prefix+"/tokens/NEW (check)", call(client, http.MethodGet, prefix+"/tokens/"+tok.Token, "", nil))
		}
		tr.record(prefix+"/tokens/OLD (check)", call(client, http.MethodGet, prefix+"/tokens/"+old, "", nil))
	})
	return tr
}

// call sends one request through the ingress controller, with body (when
// not empty), and decodes the answer into v (when not nil); anything but
// 200 is an error.
func call(client *http.Client, method, path, body string, v any) error {
	req, err := http.NewRequest(method, "https://"+domain+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if v != nil {
		return json.Unmarshal(data, v)
	}
	return nil
}
