package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// cf is the installer image's CLI as the chart's hook Jobs call it:
// `cf helm validate --values F ...` and `cf account validate-usage
// --values F ...`. It reads the values the hook mounts and requires what
// any runtime needs: its name and the platform's URL.
func cf(args []string) error {
	var words []string
	values := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--values" && i+1 < len(args):
			values = args[i+1]
			i++
		case strings.HasPrefix(a, "--values="):
			values = strings.TrimPrefix(a, "--values=")
		case !strings.HasPrefix(a, "-") && len(words) < 2:
			words = append(words, a)
		}
	}
	what := strings.Join(words, " ")
	if what != "helm validate" && what != "account validate-usage" {
		return fmt.Errorf("cf %s: not a command the chart's hooks run (helm validate, account validate-usage)", what)
	}
	if values == "" {
		return fmt.Errorf("cf %s: --values is required", what)
	}
	data, err := os.ReadFile(values)
	if err != nil {
		return fmt.Errorf("cf %s: %w", what, err)
	}
	var v struct {
		Global struct {
			Codefresh struct {
				URL string `json:"url"`
			} `json:"codefresh"`
			Runtime struct {
				Name string `json:"name"`
			} `json:"runtime"`
		} `json:"global"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("cf %s: %s: %w", what, values, err)
	}
	var missing []string
	if v.Global.Runtime.Name == "" {
		missing = append(missing, "global.runtime.name")
	}
	if v.Global.Codefresh.URL == "" {
		missing = append(missing, "global.codefresh.url")
	}
	if len(missing) > 0 {
		return errors.New("cf " + what + ": the values lack " + strings.Join(missing, " and "))
	}
	logf("cf %s: runtime %s of platform %s: values valid", what, v.Global.Runtime.Name, v.Global.Codefresh.URL)
	return nil
}
