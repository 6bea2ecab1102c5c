package configrepo

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// DefaultUsername is the HTTP basic-auth username sent with the token when
// the URL names none. GitHub and GitLab accept any non-empty username with
// a token as the password.
const DefaultUsername = "onprem"

// conn is a checked Remote, ready for go-git: the URL without credentials,
// the authentication, the TLS settings and the folder of the layout.
type conn struct {
	url     string // without user information: safe to print
	auth    *githttp.BasicAuth
	ca      []byte
	skipTLS bool
	dir     string // clean folder inside the repository, "" = root
	branch  string // as given ("" = the remote's default branch)
	secrets []string
}

// connect checks r and prepares it. Credentials embedded in the URL
// (https://user:token@host/...) are taken out of it: the username is used
// with the token, and the URL's password when no token is given.
func connect(r Remote) (*conn, error) {
	raw := strings.TrimSpace(r.URL)
	if raw == "" {
		return nil, errors.New("the configuration repository's URL is empty: give its https:// clone URL")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("configuration repository URL %q: %s", stripUserinfo(raw), schemeHint(raw, u))
	}
	c := &conn{skipTLS: r.InsecureSkipTLSVerify, branch: r.Branch}
	user, password := "", ""
	if u.User != nil {
		user = u.User.Username()
		password, _ = u.User.Password()
		u.User = nil
	}
	c.url = u.String()
	if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("configuration repository %s: plain http:// would send the token unencrypted: use https:// (http:// is allowed on loopback only)", c.url)
	}
	secret := r.Token
	if secret == "" {
		secret = password
	}
	if secret != "" {
		if user == "" {
			user = DefaultUsername
		}
		c.auth = &githttp.BasicAuth{Username: user, Password: secret}
	}
	for _, s := range []string{r.Token, password} {
		if s != "" {
			c.secrets = append(c.secrets, s, url.QueryEscape(s), url.PathEscape(s))
		}
	}
	if c.dir, err = cleanDir(r.Path); err != nil {
		return nil, fmt.Errorf("configuration repository %s: %w", c.url, err)
	}
	if r.Branch != "" {
		if err := checkBranch(r.Branch); err != nil {
			return nil, fmt.Errorf("configuration repository %s: %w", c.url, err)
		}
	}
	if r.CAFile != "" {
		if c.ca, err = os.ReadFile(r.CAFile); err != nil {
			return nil, fmt.Errorf("configuration repository %s: reading the CA file: %w (give a readable PEM file of CA certificates)", c.url, err)
		}
	}
	return c, nil
}

// endpoint is the transport endpoint of c, for advertisements.
func (c *conn) endpoint() (*transport.Endpoint, error) {
	ep, err := transport.NewEndpoint(c.url)
	if err != nil {
		return nil, fmt.Errorf("configuration repository %s: %w", c.url, err)
	}
	ep.CaBundle = c.ca
	ep.InsecureSkipTLS = c.skipTLS
	return ep, nil
}

// authMethod is c.auth as go-git's interface: nil (no authentication) when
// no credentials are given, never a typed nil.
func (c *conn) authMethod() transport.AuthMethod {
	if c.auth == nil {
		return nil
	}
	return c.auth
}

func schemeHint(raw string, u *url.URL) string {
	scpLike := !strings.Contains(raw, "://") && strings.Contains(raw, "@") && strings.Contains(raw, ":")
	switch {
	case scpLike || (u != nil && (u.Scheme == "ssh" || u.Scheme == "git")):
		return "SSH and git:// are not supported (the token authenticates over HTTPS): give the repository's https:// clone URL"
	case u == nil:
		return "not a URL: give the repository's https:// clone URL, e.g. https://git.example.com/org/config.git"
	case u.Scheme == "file":
		return "local repositories are not supported: give the repository's https:// clone URL"
	default:
		return "give the repository's https:// clone URL, e.g. https://git.example.com/org/config.git"
	}
}

// stripUserinfo removes "user:password@" from what looks like a URL, even
// one that does not parse.
func stripUserinfo(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	rest := raw
	scheme := ""
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest = raw[:i+3], raw[i+3:]
	}
	host := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		host = rest[:i]
	}
	if i := strings.LastIndex(host, "@"); i >= 0 {
		return scheme + rest[i+1:]
	}
	return raw
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cleanDir checks the folder of the layout: a clean relative path ("" and
// "." are the repository's root).
func cleanDir(p string) (string, error) {
	if p == "" || p == "." {
		return "", nil
	}
	bad := func(why string) error {
		return fmt.Errorf("path %q %s: give a clean relative folder of the repository, e.g. platform or clusters/prod (or nothing for the root)", p, why)
	}
	switch {
	case strings.Contains(p, `\`):
		return "", bad(`contains "\"`)
	case path.IsAbs(p):
		return "", bad("is absolute")
	case path.Clean(p) != p:
		return "", bad("is not clean (no ., .., empty or trailing segments)")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", bad(`leaves the repository ("..")`)
		}
		if strings.EqualFold(seg, ".git") {
			return "", bad("names a .git folder")
		}
	}
	return p, nil
}

// checkBranch refuses names that are not a branch (refs/heads/x, HEAD,
// invalid ref names).
func checkBranch(b string) error {
	if strings.HasPrefix(b, "refs/") || b == "HEAD" {
		return fmt.Errorf("branch %q: give the branch's short name, e.g. main", b)
	}
	if err := branchRef(b).Validate(); err != nil {
		return fmt.Errorf("branch %q is not a valid branch name: %w", b, err)
	}
	return nil
}
