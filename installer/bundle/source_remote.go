package bundle

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"onprem.dev/onprem/installer/images"
)

// RemoteOptions configure a registry source.
type RemoteOptions struct {
	// Insecure allows plain HTTP and untrusted certificates.
	Insecure bool
	// Keychain finds credentials per registry (default: the docker config
	// of the user, authn.DefaultKeychain).
	Keychain authn.Keychain
	// Platform is picked from multi-platform images (default linux/amd64).
	Platform *v1.Platform
	// Transport replaces the HTTP transport (tests).
	Transport http.RoundTripper
}

// RemoteSource reads images from their registries.
func RemoteSource(opts RemoteOptions) Source {
	return &remoteSource{opts: opts}
}

type remoteSource struct{ opts RemoteOptions }

func (s *remoteSource) Image(ctx context.Context, req ImageRequest) (v1.Image, error) {
	var nopts []name.Option
	if s.opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	refStr := req.Reference
	if req.Digest != "" {
		// Fetch by digest: the registry must serve exactly what is pinned.
		tag, err := name.NewTag(req.Reference, nopts...)
		if err != nil {
			return nil, fmt.Errorf("reference %q: %w", req.Reference, err)
		}
		refStr = tag.Repository.String() + "@" + req.Digest
	}
	ref, err := name.ParseReference(refStr, nopts...)
	if err != nil {
		return nil, fmt.Errorf("reference %q: %w", refStr, err)
	}
	desc, err := remote.Get(ref, append(s.remoteOptions(ctx), remote.WithPlatform(s.platform()))...)
	if err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) {
			switch terr.StatusCode {
			case http.StatusNotFound:
				return nil, fmt.Errorf("%s: %w", ref, ErrImageNotFound)
			case http.StatusUnauthorized, http.StatusForbidden:
				return nil, &AuthError{Host: ref.Context().RegistryStr(), Err: err}
			}
		}
		return nil, fmt.Errorf("fetching %s: %w", ref, err)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if desc.MediaType.IsIndex() {
		return &fromIndex{Image: img, index: desc.Digest}, nil
	}
	return img, nil
}

func (s *remoteSource) platform() v1.Platform {
	if s.opts.Platform != nil {
		return *s.opts.Platform
	}
	return DefaultPlatform
}

// remoteOptions are the registry options of every request: credentials
// from the keychain and the transport.
func (s *remoteSource) remoteOptions(ctx context.Context) []remote.Option {
	kc := s.opts.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	rt := s.opts.Transport
	if rt == nil {
		rt = images.Transport(s.opts.Insecure)
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(rt)}
}
