package console

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/preflight"
)

//go:embed assets/*.html assets/static
var assets embed.FS

var staticFS = func() fs.FS {
	f, err := fs.Sub(assets, "assets/static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return f
}()

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Local().Format("2006-01-02 15:04:05")
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"level": func(l certs.Level) string { return string(l) },
	"dur":   func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) },
}).ParseFS(assets, "assets/*.html"))

// page is what every template gets.
type page struct {
	Title string
	// Error is a message for the operator (login), Banner one about the
	// cluster (it could not be read; the page retries).
	Error  string
	Banner string
	CSRF   string
	Status *action.StatusResult
	Detail *action.ComponentDetail
	// Name is the component a component page is about.
	Name string
	// Attachments are the runners and runtimes.
	Attachments *Attachments
	// Preflight is a report of the checks just run; PreflightError says
	// why they failed or could not run.
	Preflight      *preflight.Report
	PreflightError string
	// Versions are where an upgrade can go; Plan is one's plan, To its
	// target.
	Versions *action.UpgradeVersionsResult
	Plan     *action.UpgradePlanResult
	To       string
	// Op is an operation started from the console; Ops are all of them.
	Op  *OpView
	Ops []OpView
	// Config is the configuration file, Check the validation of an edited
	// copy, EditText the text in the editor.
	Config   *Configuration
	Check    *ConfigCheck
	EditText string
	// Backups are the installation's backups in its bucket; BackupsError
	// says why they could not be listed.
	Backups      *action.BackupListResult
	BackupsError string
	// Live is the fragment URL the page polls, every Interval
	// milliseconds (default 5000).
	Live     string
	Interval int
	Now      time.Time
}

// readTimeout bounds what a page waits for the cluster.
const readTimeout = 20 * time.Second

func (s *Server) render(w http.ResponseWriter, code int, name string, p page) {
	var b bytes.Buffer
	if p.Now.IsZero() {
		p.Now = s.now()
	}
	if err := pages.ExecuteTemplate(&b, name, p); err != nil {
		s.log.Error("console: rendering a page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

func (s *Server) readStatus(ctx context.Context) (*action.StatusResult, string) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	st, err := s.source.Status(ctx)
	if err != nil {
		return st, "The installation could not be read: " + err.Error() + ". The page tries again every few seconds."
	}
	return st, ""
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request, sess *session) {
	st, banner := s.readStatus(r.Context())
	title := "Overview"
	if st != nil && st.Installation != "" {
		title = "Overview of " + st.Installation
	}
	s.render(w, http.StatusOK, "overview", page{Title: title, Status: st, Banner: banner, CSRF: sess.csrf, Live: "/live/overview"})
}

func (s *Server) overviewFragment(w http.ResponseWriter, r *http.Request, sess *session) {
	st, banner := s.readStatus(r.Context())
	s.render(w, http.StatusOK, "overview-live", page{Status: st, Banner: banner, CSRF: sess.csrf})
}

func (s *Server) readComponent(ctx context.Context, name string) (*action.ComponentDetail, string) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	d, err := s.source.Component(ctx, name)
	if err != nil {
		return d, fmt.Sprintf("Component %s could not be read: %v. The page tries again every few seconds.", name, err)
	}
	return d, ""
}

func (s *Server) component(w http.ResponseWriter, r *http.Request, sess *session) {
	name := r.PathValue("name")
	d, banner := s.readComponent(r.Context(), name)
	s.render(w, http.StatusOK, "component", page{Title: "Component " + name, Name: name, Detail: d, Banner: banner, CSRF: sess.csrf,
		Live: "/live/components/" + template.URLQueryEscaper(name)})
}

func (s *Server) componentFragment(w http.ResponseWriter, r *http.Request, sess *session) {
	name := r.PathValue("name")
	d, banner := s.readComponent(r.Context(), name)
	s.render(w, http.StatusOK, "component-live", page{Name: name, Detail: d, Banner: banner, CSRF: sess.csrf})
}

// preflightTimeout bounds a run of the checks from the console.
const preflightTimeout = 5 * time.Minute

func (s *Server) preflightPage(w http.ResponseWriter, _ *http.Request, sess *session) {
	s.render(w, http.StatusOK, "preflight", page{Title: "Preflight", CSRF: sess.csrf})
}

// preflightRun runs the checks (a POST: it reaches the cluster and the
// registries) and shows every result with its remediation.
func (s *Server) preflightRun(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), preflightTimeout)
	defer cancel()
	rep, err := s.source.Preflight(ctx)
	p := page{Title: "Preflight", CSRF: sess.csrf, Preflight: rep}
	if err != nil {
		p.PreflightError = err.Error()
	}
	s.render(w, http.StatusOK, "preflight", p)
}

func (s *Server) readAttachments(ctx context.Context) (*Attachments, string) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	a, err := s.source.Attachments(ctx)
	if err != nil {
		return a, "The runners and runtimes could not be read: " + err.Error() + ". The page tries again every few seconds."
	}
	return a, ""
}

func (s *Server) attachments(w http.ResponseWriter, r *http.Request, sess *session) {
	a, banner := s.readAttachments(r.Context())
	s.render(w, http.StatusOK, "attachments", page{Title: "Runners and runtimes", Attachments: a, Banner: banner, CSRF: sess.csrf, Live: "/live/attachments"})
}

func (s *Server) attachmentsFragment(w http.ResponseWriter, r *http.Request, sess *session) {
	a, banner := s.readAttachments(r.Context())
	s.render(w, http.StatusOK, "attachments-live", page{Attachments: a, Banner: banner, CSRF: sess.csrf})
}
