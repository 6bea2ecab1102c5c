package config

import (
	"encoding/json"
	"testing"

	"github.com/sethvargo/go-envconfig"
)

// mapLookup is an environment with exactly these variables.
func mapLookup(m map[string]string) envconfig.Lookuper {
	if m == nil {
		m = map[string]string{}
	}
	return envconfig.MapLookuper(m)
}

// clone deep-copies an installation.
func clone(t *testing.T, in *Installation) *Installation {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := new(Installation)
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	return out
}
