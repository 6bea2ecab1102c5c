package bundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

// dockerConfig is the part of ~/.docker/config.json (and of a
// kubernetes.io/dockerconfigjson Secret's .dockerconfigjson) that holds
// credentials.
type dockerConfig struct {
	Auths map[string]authn.AuthConfig `json:"auths"`
}

// secretManifest is a Kubernetes Secret as `kubectl get secret -o yaml`
// prints it.
type secretManifest struct {
	Kind       string            `json:"kind"`
	Type       string            `json:"type"`
	Data       map[string][]byte `json:"data"`
	StringData map[string]string `json:"stringData"`
}

// KeychainFromDockerConfig reads registry credentials from any of: a
// docker config.json ({"auths": {...}}), the .dockerconfigjson data of a
// kubernetes.io/dockerconfigjson Secret (the same JSON), a legacy
// .dockercfg (the auths map alone), or a whole Secret manifest (YAML or
// JSON, as `kubectl get secret NAME -o yaml` prints it) of type
// kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg. Each entry
// may give "auth" (base64 user:password), "username"/"password",
// "identitytoken" or "registrytoken". Credential helpers (credsStore) are
// not run. Registries without an entry get anonymous access.
func KeychainFromDockerConfig(data []byte) (authn.Keychain, error) {
	auths, err := parseDockerConfig(data)
	if err != nil {
		return nil, err
	}
	kc := configKeychain{}
	for k, v := range auths {
		kc[normalizeRegistryKey(k)] = v
	}
	return kc, nil
}

func parseDockerConfig(data []byte) (map[string]authn.AuthConfig, error) {
	var sec secretManifest
	if err := yaml.Unmarshal(data, &sec); err == nil && sec.Kind == "Secret" {
		for _, key := range []string{".dockerconfigjson", ".dockercfg"} {
			if v, ok := sec.StringData[key]; ok {
				return parseDockerConfig([]byte(v))
			}
			if v, ok := sec.Data[key]; ok {
				return parseDockerConfig(v)
			}
		}
		return nil, fmt.Errorf("secret of type %q has no .dockerconfigjson or .dockercfg data", sec.Type)
	}
	var probe map[string]json.RawMessage
	if err := yaml.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("docker config: not JSON: %w", err)
	}
	if raw, ok := probe["auths"]; ok {
		var cfg dockerConfig
		if err := json.Unmarshal([]byte(`{"auths":`+string(raw)+`}`), &cfg); err != nil {
			return nil, fmt.Errorf("docker config: auths: %w", err)
		}
		return cfg.Auths, nil
	}
	// Legacy .dockercfg: the auths map at the top.
	var legacy map[string]authn.AuthConfig
	if err := yaml.Unmarshal(data, &legacy); err != nil {
		return nil, fmt.Errorf("docker config: neither {\"auths\": ...} nor a .dockercfg map: %w", err)
	}
	if len(legacy) == 0 {
		return nil, errors.New("docker config: no credentials in it")
	}
	return legacy, nil
}

// normalizeRegistryKey maps the forms a config key takes
// (https://host/v1/, http://host, host) to the host.
func normalizeRegistryKey(k string) string {
	k = strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://")
	if i := strings.Index(k, "/"); i >= 0 {
		k = k[:i]
	}
	if k == "index.docker.io" || k == "registry-1.docker.io" || k == "docker.io" {
		return name.DefaultRegistry
	}
	return k
}

type configKeychain map[string]authn.AuthConfig

// Resolve returns the credentials of the resource's registry.
func (kc configKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	key := normalizeRegistryKey(r.RegistryStr())
	cfg, ok := kc[key]
	if !ok {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(cfg), nil
}
