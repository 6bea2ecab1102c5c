package chartfetch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"helm.sh/helm/v4/pkg/registry"
)

// fetchOCI pulls the chart's archive from an OCI registry with the Helm
// registry client.
func fetchOCI(ctx context.Context, src Source, u *url.URL, o Options, base http.RoundTripper) ([]byte, error) {
	rec := &recorder{base: base}
	retrying := registry.NewTransport(false) // retries 5xx, 429 and timeouts
	retrying.Base = rec
	opts := []registry.ClientOption{
		registry.ClientOptHTTPClient(&http.Client{Transport: boundTransport{ctx: ctx, base: retrying}}),
		registry.ClientOptWriter(io.Discard),
	}
	if o.PlainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	if o.Username != "" || o.Password != "" {
		opts = append(opts, registry.ClientOptBasicAuth(o.Username, o.Password))
	}
	if o.RegistryConfig != "" {
		if _, err := os.Stat(o.RegistryConfig); err != nil {
			return nil, fmt.Errorf("%w: the registry config: %w", ErrInvalidSource, err)
		}
		opts = append(opts, registry.ClientOptCredentialsFile(o.RegistryConfig))
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("chart %s: setting up the registry client (registry config %q): %w", src, o.RegistryConfig, err)
	}
	repo := u.Host + strings.TrimSuffix(u.Path, "/") + "/" + src.Chart
	res, err := client.Pull(repo + ":" + src.Version)
	if err == nil {
		if res.Chart == nil || len(res.Chart.Data) == 0 {
			return nil, &Error{Kind: ErrInvalidChart, Repository: src.Repository, Chart: src.Chart, Version: src.Version, URL: repo,
				Err: fmt.Errorf("the artifact has no chart layer")}
		}
		return res.Chart.Data, nil
	}
	at, status, terr := rec.last()
	e := &Error{Repository: src.Repository, Chart: src.Chart, Version: src.Version, URL: at, Err: err}
	switch {
	case ctx.Err() != nil:
		e.Kind, e.Err = ErrUnreachable, ctx.Err()
	case terr != nil:
		e.Kind, e.Hint = ErrUnreachable, transportHint(terr, o)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = ErrAuth
	case status == http.StatusNotFound:
		e.Kind = ErrNotFound
		// Best effort: the versions the registry has.
		if tags, terr := client.Tags(repo); terr == nil {
			e.Available = tags
		}
	case status >= 400:
		e.Kind = ErrUnreachable
	default:
		e.Kind = ErrInvalidChart
	}
	return nil, e
}
