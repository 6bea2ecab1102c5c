package refservice

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The ring across a rotation, as the service chart gives it: tokens and
// sealed values made with the old keys are accepted while the old keys
// are in the rings and refused once retired; the new keys, staged in the
// ring before they sign, are accepted by a pod that still signs with the
// old ones.
func TestKeysRingAcrossARotation(t *testing.T) {
	envOf := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	keys := func(kv ...string) *Keys {
		t.Helper()
		var missing []string
		k := keysFromEnv(envOf(kv...), &missing)
		if len(missing) > 0 || k == nil {
			t.Fatalf("keys from %v: missing %v", kv, missing)
		}
		return k
	}
	before := keys("SIGNING_KEY", "s0", "ENCRYPTION_KEY", "e0")
	staged := keys("SIGNING_KEY", "s0", "SIGNING_KEYS", "s1\ns0", "ENCRYPTION_KEY", "e0", "ENCRYPTION_KEYS", "e1\ne0")
	switched := keys("SIGNING_KEY", "s1", "SIGNING_KEYS", "s1\ns0", "ENCRYPTION_KEY", "e1", "ENCRYPTION_KEYS", "e1\ne0")
	retired := keys("SIGNING_KEY", "s1", "SIGNING_KEYS", "s1", "ENCRYPTION_KEY", "e1", "ENCRYPTION_KEYS", "e1")

	now := time.Unix(1_800_000_000, 0)
	oldToken, newToken := before.Token("pipelines-api", now), switched.Token("pipelines-api", now)
	oldSealed, err := before.Seal([]byte("written before"))
	if err != nil {
		t.Fatal(err)
	}
	newSealed, err := switched.Seal([]byte("written after"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name             string
		k                *Keys
		oldOK, newTokOK  bool
		oldSealOK, newOK bool
	}{
		{"before", before, true, false, true, false},
		{"staged", staged, true, true, true, true},
		{"switched", switched, true, true, true, true},
		{"retired", retired, false, true, false, true},
	} {
		check := func(what string, err error, want bool) {
			if (err == nil) != want || err != nil && !errors.Is(err, ErrRefused) {
				t.Errorf("%s: %s: %v, want accepted=%v", tc.name, what, err, want)
			}
		}
		check("old token", tc.k.VerifyToken(oldToken), tc.oldOK)
		check("new token", tc.k.VerifyToken(newToken), tc.newTokOK)
		v, err := tc.k.Unseal(oldSealed)
		check("old sealed value", err, tc.oldSealOK)
		if err == nil && string(v) != "written before" {
			t.Errorf("%s: the old sealed value opens as %q", tc.name, v)
		}
		_, err = tc.k.Unseal(newSealed)
		check("new sealed value", err, tc.newOK)
	}
	if err := staged.VerifyToken(oldToken[:len(oldToken)-2] + "AA"); !errors.Is(err, ErrRefused) {
		t.Errorf("a forged token: %v", err)
	}

	var missing []string
	if keysFromEnv(envOf("SIGNING_KEY", "s0"), &missing); len(missing) != 1 || missing[0] != "ENCRYPTION_KEY" {
		t.Errorf("a signing key alone: missing %v", missing)
	}
	if k := keysFromEnv(envOf(), &missing); k != nil {
		t.Error("no keys in the environment gave keys")
	}
}

// The endpoints: a token and a sealed value made by one pod are checked
// by another; a service without keys says so.
func TestKeysEndpoints(t *testing.T) {
	var missing []string
	env := map[string]string{"SIGNING_KEY": "s1", "SIGNING_KEYS": "s1\ns0", "ENCRYPTION_KEY": "e1", "ENCRYPTION_KEYS": "e1\ne0"}
	a := &Service{cfg: Config{Service: "gitops-api", Keys: keysFromEnv(func(k string) string { return env[k] }, &missing)}}
	env["SIGNING_KEY"], env["ENCRYPTION_KEY"] = "s0", "e0"
	b := &Service{cfg: Config{Service: "gitops-api", Keys: keysFromEnv(func(k string) string { return env[k] }, &missing)}}
	do := func(s *Service, method, path, body string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		var out map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	code, tok := do(a, http.MethodPost, "/gitops/api/tokens", "")
	if code != http.StatusOK {
		t.Fatalf("POST tokens: %d %v", code, tok)
	}
	if code, out := do(b, http.MethodGet, "/gitops/api/tokens/"+tok["token"].(string), ""); code != http.StatusOK || out["valid"] != true {
		t.Errorf("a token of the new key, checked by a pod that signs with the old: %d %v", code, out)
	}
	if code, out := do(b, http.MethodGet, "/gitops/api/tokens/e30.AAAA", ""); code != http.StatusUnauthorized {
		t.Errorf("a forged token: %d %v", code, out)
	}
	code, sealed := do(b, http.MethodPost, "/gitops/api/sealed", "a secret note")
	if code != http.StatusOK {
		t.Fatalf("POST sealed: %d %v", code, sealed)
	}
	if code, out := do(a, http.MethodGet, "/gitops/api/sealed/"+sealed["sealed"].(string), ""); code != http.StatusOK || out["value"] != "a secret note" {
		t.Errorf("a value sealed with the old key, opened by a pod that seals with the new: %d %v", code, out)
	}
	none := &Service{cfg: Config{Service: "audit-manager"}}
	if code, _ := do(none, http.MethodPost, "/tokens", ""); code != http.StatusNotImplemented {
		t.Errorf("a service without keys: %d", code)
	}
	if code, _ := do(a, http.MethodGet, "/tokens", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET tokens: %d", code)
	}
}
