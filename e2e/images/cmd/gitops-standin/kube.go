package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// serviceAccountDir is where the kubelet mounts the pod's service account.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// kube is the pod's access to its API server, as its service account.
type kube struct {
	base, namespace, token string
	client                 *http.Client
}

// inCluster reads the pod's service account and the API server's address.
func inCluster() (*kube, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset")
	}
	read := func(name string) ([]byte, error) {
		data, err := os.ReadFile(filepath.Join(serviceAccountDir, name))
		if err != nil {
			return nil, fmt.Errorf("the pod's service account: %w", err)
		}
		return data, nil
	}
	token, err := read("token")
	if err != nil {
		return nil, err
	}
	ca, err := read("ca.crt")
	if err != nil {
		return nil, err
	}
	ns, err := read("namespace")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("the pod's service account: ca.crt holds no certificate")
	}
	return &kube{
		base:      "https://" + net.JoinHostPort(host, port),
		namespace: strings.TrimSpace(string(ns)),
		token:     strings.TrimSpace(string(token)),
		client:    &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
	}, nil
}

// ensureSecret creates the Secret name with data in the pod's namespace
// unless it exists (then it is left as it is, as the real components do).
// A refused request is an error at once; an unreachable API server is
// retried for two minutes.
func (k *kube) ensureSecret(ctx context.Context, name string, data map[string]string) (created bool, err error) {
	body, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata":   map[string]any{"name": name, "labels": map[string]string{"app.kubernetes.io/created-by": "gitops-standin"}},
		"stringData": data,
	})
	if err != nil {
		return false, err
	}
	url := k.base + "/api/v1/namespaces/" + k.namespace + "/secrets"
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, msg, err := k.post(ctx, url, body)
		switch {
		case err == nil && code == http.StatusCreated:
			return true, nil
		case err == nil && code == http.StatusConflict:
			return false, nil
		case err == nil && code < 500:
			return false, fmt.Errorf("creating Secret %s/%s: %d %s", k.namespace, name, code, msg)
		}
		if err == nil {
			err = fmt.Errorf("%d %s", code, msg)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false, fmt.Errorf("creating Secret %s/%s: %w", k.namespace, name, err)
		}
		logf("creating Secret %s: %v (retrying)", name, err)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

func (k *kube) post(ctx context.Context, url string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var status struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(msg, &status) == nil && status.Message != "" {
		return resp.StatusCode, status.Message, nil
	}
	return resp.StatusCode, strings.TrimSpace(string(msg)), nil
}

// randomToken is a random password (26 base32 characters).
func randomToken() string { return rand.Text() }

// ensureSecrets creates each Secret (name → data) that is missing and
// logs which were created, never their values.
func ensureSecrets(ctx context.Context, who string, secrets map[string]map[string]string) error {
	k, err := inCluster()
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	for name, data := range secrets {
		created, err := k.ensureSecret(ctx, name, data)
		if err != nil {
			return fmt.Errorf("%s: %w", who, err)
		}
		if created {
			logf("%s: Secret %s created", who, name)
		} else {
			logf("%s: Secret %s exists, kept", who, name)
		}
	}
	return nil
}

// redisInitialPassword is `argocd admin redis-initial-password`: the
// Secret argocd-redis with a generated password under auth.
func redisInitialPassword(ctx context.Context) error {
	return ensureSecrets(ctx, "argocd admin redis-initial-password", map[string]map[string]string{
		"argocd-redis": {"auth": randomToken()},
	})
}
