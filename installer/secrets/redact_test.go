package secrets

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/credentials"
)

func TestRedactRawAndBase64(t *testing.T) {
	pw := []byte("Zq3kP0aLx9VbN2mT7cYh4RsW1eUo8GjD")
	key := []byte("c2VjcmV0LWtleS1ieXRlcy0xMjM0NTY3ODkwYWJjZGVm")
	text := "password=" + string(pw) + "\n" +
		"data:\n  password: " + base64.StdEncoding.EncodeToString(pw) + "\n" +
		"  url: " + base64.RawURLEncoding.EncodeToString(key) + "\n" +
		"key " + string(key) + " and again " + string(key) + "\n" +
		"username: onprem\n"
	got := Redact(text, pw, key, nil, []byte{})
	for _, leak := range []string{string(pw), base64.StdEncoding.EncodeToString(pw), string(key), base64.RawURLEncoding.EncodeToString(key)} {
		if strings.Contains(got, leak) {
			t.Errorf("redacted text still holds %q:\n%s", leak, got)
		}
	}
	if n := strings.Count(got, Redacted); n != 5 {
		t.Errorf("%d redactions, want 5:\n%s", n, got)
	}
	if !strings.Contains(got, "username: onprem") || !strings.Contains(got, "password: "+Redacted+"\n") {
		t.Errorf("redaction changed more than the values:\n%s", got)
	}
	if Redact(text) != text || Redact(text, nil, []byte("")) != text {
		t.Error("no values, yet the text changed")
	}
}

// A value that starts with another one is hidden whole.
func TestRedactPrefersTheLongestForm(t *testing.T) {
	got := Redact("a=abcdefgh0123 b=abcdefgh", []byte("abcdefgh"), []byte("abcdefgh0123"))
	if got != "a=<redacted> b=<redacted>" {
		t.Errorf("got %q", got)
	}
}

// A PEM key shown in a YAML block (re-indented) or as JSON (escaped
// newlines) is hidden too, and a Secret dumped as YAML or JSON loses every
// secret value in every form.
func TestRedactSecretDumps(t *testing.T) {
	data, err := Generate(tlsSecret(), GenerateOptions{Domain: testDomain})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := data["tls.key"]
	text := "tls.key: |\n    " + strings.ReplaceAll(strings.TrimSpace(string(keyPEM)), "\n", "\n    ") + "\n"
	js, _ := json.Marshal(map[string]string{"tls.key": string(keyPEM)})
	text += string(js) + "\n"
	got := Redact(text, keyPEM)
	for _, line := range strings.Split(string(keyPEM), "\n") {
		if len(line) > 0 && !strings.HasPrefix(line, "-----") && strings.Contains(got, line) {
			t.Errorf("key line %q left in:\n%s", line, got)
		}
	}

	plan := credentials.Plan(credentials.Needs{Internal: map[string]bool{"rabbitmq": true}, PlatformKeys: true})
	var values [][]byte
	var dump string
	for _, s := range plan {
		d, err := Generate(s, GenerateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj := newSecret("onprem", s, d)
		obj.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}
		y, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		withString := &corev1.Secret{StringData: map[string]string{}}
		for k, v := range d {
			withString.StringData[k] = string(v)
			if !strings.Contains(obj.Annotations[AnnotationPublicKeys], k) {
				values = append(values, v)
			}
		}
		sy, _ := yaml.Marshal(withString)
		dump += string(y) + string(j) + string(sy)
	}
	got = Redact(dump, values...)
	for _, v := range values {
		for _, form := range []string{string(v), base64.StdEncoding.EncodeToString(v)} {
			if strings.Contains(got, form) {
				t.Errorf("dump still holds a secret value:\n%s", got)
			}
		}
	}
	if !strings.Contains(got, "username: "+base64.StdEncoding.EncodeToString([]byte("onprem"))) {
		t.Errorf("the public username was redacted too:\n%s", got)
	}
}
