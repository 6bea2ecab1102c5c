// Package console is onprem's admin console: web pages, served by the
// onprem binary on the operator's machine, that show the installation
// through the same library actions as the CLI (installer/action), never a
// second code path.
//
// Access: the console prints a URL with a random token; opening it (or
// giving the token on the login page) starts a session held in a cookie
// (HttpOnly, SameSite=Strict, Secure over TLS). Every request but the
// login page and the static files needs the session; every change (POST)
// needs the session's CSRF token too. Pages never hold a secret value:
// what they show comes from actions that redact (logs) or never read
// values (status). Responses forbid framing, caching and sending the URL
// (with its token) as a referrer.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// SessionCookie is the name of the session cookie.
const SessionCookie = "onprem_console"

// sessionTTL is how long a session lives without a request.
const sessionTTL = 12 * time.Hour

// Server serves the console.
type Server struct {
	source Source
	token  string
	secure bool
	log    *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
	now      func() time.Time

	ops *operations
	// tmp holds the support bundles being written for a download.
	tmp string
}

type session struct {
	csrf     string
	lastSeen time.Time
}

// Options configure a Server.
type Options struct {
	// Token is the login token (NewToken makes one).
	Token string
	// Secure marks cookies Secure: set it when serving over TLS.
	Secure bool
	Logger *slog.Logger
	// Context is what the console's operations run under: when it ends,
	// they are interrupted (and record it, as the CLI's do). Default:
	// context.Background().
	Context context.Context
	// TempDir is where support bundles are written before they are sent
	// (default: the system's).
	TempDir string
}

// New returns a console server for source.
func New(source Source, o Options) (*Server, error) {
	if len(o.Token) < 32 {
		return nil, errors.New("console: the login token must have at least 32 characters (use NewToken)")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	base := o.Context
	if base == nil {
		base = context.Background()
	}
	return &Server{source: source, token: o.Token, secure: o.Secure, log: log, sessions: map[string]*session{}, now: time.Now,
		ops: &operations{base: base}, tmp: o.TempDir}, nil
}

// NewToken is a random login token (256 bits, hex).
func NewToken() (string, error) {
	return randomHex(32)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("console: generating a random token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Handler is the console's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFS)))
	mux.HandleFunc("GET /login", s.login)
	mux.HandleFunc("POST /login", s.login)
	mux.Handle("POST /logout", s.authorized(s.logout))
	mux.Handle("GET /{$}", s.authorized(s.overview))
	mux.Handle("GET /live/overview", s.authorized(s.overviewFragment))
	mux.Handle("GET /components/{name}", s.authorized(s.component))
	mux.Handle("GET /live/components/{name}", s.authorized(s.componentFragment))
	mux.Handle("GET /attachments", s.authorized(s.attachments))
	mux.Handle("GET /live/attachments", s.authorized(s.attachmentsFragment))
	mux.Handle("GET /preflight", s.authorized(s.preflightPage))
	mux.Handle("POST /preflight", s.authorized(s.preflightRun))
	mux.Handle("GET /upgrade", s.authorized(s.upgradePage))
	mux.Handle("GET /upgrade/plan", s.authorized(s.upgradePlan))
	mux.Handle("POST /upgrade", s.authorized(s.upgradeApply))
	mux.Handle("GET /operations/{id}", s.authorized(s.operation))
	mux.Handle("GET /live/operations/{id}", s.authorized(s.operationFragment))
	mux.Handle("GET /config", s.authorized(s.configPage))
	mux.Handle("POST /config/check", s.authorized(s.configCheck))
	mux.Handle("POST /config/apply", s.authorized(s.configApply))
	mux.Handle("GET /support", s.authorized(s.supportPage))
	mux.Handle("POST /support", s.authorized(s.supportDownload))
	return headers(mux)
}

// headers sets the security headers of every response.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// login starts a session for the right token (from the URL the console
// printed, or the login form) and shows the login page otherwise.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	given := r.URL.Query().Get("token")
	if r.Method == http.MethodPost {
		given = r.PostFormValue("token")
	}
	if given == "" {
		s.render(w, http.StatusOK, "login", page{Title: "Log in"})
		return
	}
	if subtle.ConstantTimeCompare([]byte(given), []byte(s.token)) != 1 {
		s.log.Warn("console: a login with a wrong token", "remote", r.RemoteAddr)
		s.render(w, http.StatusUnauthorized, "login", page{Title: "Log in", Error: "That token is not this console's. Use the URL 'onprem console' printed, or the token in it."})
		return
	}
	id, err := randomHex(32)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	csrf, err := randomHex(32)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	s.sessions[id] = &session{csrf: csrf, lastSeen: s.now()}
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: s.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL.Seconds())})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

type ctxKey struct{}

// authorized serves next to a request with a live session (and, for a
// POST, the session's CSRF token); others get the login page (401) or 403.
func (s *Server) authorized(next func(http.ResponseWriter, *http.Request, *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess := s.session(r)
		if sess == nil {
			s.render(w, http.StatusUnauthorized, "login", page{Title: "Log in", Error: "Log in with the URL 'onprem console' printed (your session ended, or never began)."})
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(sess.csrf)) != 1 {
				http.Error(w, "403 forbidden: the form's CSRF token is missing or wrong; reload the page and try again", http.StatusForbidden)
				return
			}
		}
		next(w, r, sess)
	})
}

// session returns the request's live session, nil if none.
func (s *Server) session(r *http.Request) *session {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[c.Value]
	now := s.now()
	if sess == nil || now.Sub(sess.lastSeen) > sessionTTL {
		delete(s.sessions, c.Value)
		return nil
	}
	sess.lastSeen = now
	return sess
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, _ *session) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.mu.Lock()
		delete(s.sessions, c.Value)
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	s.render(w, http.StatusOK, "login", page{Title: "Log in", Error: "Logged out."})
}
