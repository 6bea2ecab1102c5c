package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// planTimeout bounds the planning of an upgrade and the check of an edited
// configuration (both render every component and read the cluster).
const planTimeout = 2 * time.Minute

// supportTimeout bounds the writing of a support bundle for a download.
const supportTimeout = 5 * time.Minute

// maxConfigBytes bounds an edited configuration.
const maxConfigBytes = 1 << 20

func (s *Server) upgradePage(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	v, err := s.source.UpgradeVersions(ctx)
	p := page{Title: "Upgrade", CSRF: sess.csrf, Versions: v, Ops: s.ops.list()}
	if err != nil {
		p.Banner = "The versions could not be read: " + err.Error()
	}
	s.render(w, http.StatusOK, "upgrade", p)
}

// upgradePlan shows the plan of an upgrade to ?to= (a GET: it changes
// nothing), with the form that applies it.
func (s *Server) upgradePlan(w http.ResponseWriter, r *http.Request, sess *session) {
	to := strings.TrimSpace(r.URL.Query().Get("to"))
	if to == "" {
		http.Redirect(w, r, "/upgrade", http.StatusSeeOther)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), planTimeout)
	defer cancel()
	plan, err := s.source.UpgradePlan(ctx, to)
	p := page{Title: "Upgrade plan to " + to, CSRF: sess.csrf, To: to, Plan: plan}
	if err != nil {
		p.Banner = "The upgrade to " + to + " cannot be planned: " + err.Error()
	}
	s.render(w, http.StatusOK, "plan", p)
}

// upgradeApply starts the upgrade the operator confirmed, and sends the
// browser to its progress.
func (s *Server) upgradeApply(w http.ResponseWriter, r *http.Request, sess *session) {
	to := strings.TrimSpace(r.PostFormValue("to"))
	if to == "" || r.PostFormValue("confirm") != "yes" {
		s.render(w, http.StatusBadRequest, "plan", page{Title: "Upgrade plan to " + to, CSRF: sess.csrf, To: to,
			Banner: "Nothing was started: read the plan and tick the box that confirms it, then apply."})
		return
	}
	s.startOp(w, r, sess, "upgrade", "Upgrade to "+to, func(ctx context.Context, p Progress) error {
		return s.source.Upgrade(ctx, to, p)
	})
}

// startOp starts an operation and redirects to its page; a running one
// is named instead (409).
func (s *Server) startOp(w http.ResponseWriter, r *http.Request, sess *session, kind, title string, fn func(context.Context, Progress) error) {
	op, err := s.ops.start(kind, title, fn)
	var busy *BusyError
	if errors.As(err, &busy) {
		v := busy.Running.View()
		s.render(w, http.StatusConflict, "operation", page{Title: v.Title, CSRF: sess.csrf, Op: &v, Live: "/live/operations/" + v.ID, Interval: 1000,
			Banner: "Nothing was started: " + err.Error() + "."})
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.log.Info("console: operation started", "operation", op.Title, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/operations/"+op.ID, http.StatusSeeOther)
}

func (s *Server) findOp(w http.ResponseWriter, r *http.Request) (*OpView, bool) {
	op, err := s.ops.get(r.PathValue("id"))
	if err != nil {
		http.Error(w, "404 "+err.Error()+" (operations are kept while the console runs; the installation's history is on the overview)", http.StatusNotFound)
		return nil, false
	}
	v := op.View()
	return &v, true
}

func (s *Server) operation(w http.ResponseWriter, r *http.Request, sess *session) {
	v, ok := s.findOp(w, r)
	if !ok {
		return
	}
	s.render(w, http.StatusOK, "operation", page{Title: v.Title, CSRF: sess.csrf, Op: v, Live: "/live/operations/" + v.ID, Interval: 1000})
}

func (s *Server) operationFragment(w http.ResponseWriter, r *http.Request, sess *session) {
	v, ok := s.findOp(w, r)
	if !ok {
		return
	}
	s.render(w, http.StatusOK, "operation-live", page{CSRF: sess.csrf, Op: v})
}

func (s *Server) configPage(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	c, err := s.source.Configuration(ctx)
	p := page{Title: "Configuration", CSRF: sess.csrf, Config: c}
	if c != nil {
		p.EditText = c.Text
	}
	if err != nil {
		p.Banner = "The configuration is not valid as it is: " + err.Error()
	}
	s.render(w, http.StatusOK, "config", p)
}

// editedText is the form's configuration: the browser sends a textarea's
// line breaks as CRLF, which the file never had.
func editedText(r *http.Request) ([]byte, error) {
	text := r.PostFormValue("text")
	if len(text) > maxConfigBytes {
		return nil, fmt.Errorf("the configuration is larger than %d bytes", maxConfigBytes)
	}
	return []byte(strings.ReplaceAll(text, "\r\n", "\n")), nil
}

// configCheck validates an edited copy and shows every problem with its
// line, or what installing it would change.
func (s *Server) configCheck(w http.ResponseWriter, r *http.Request, sess *session) {
	text, err := editedText(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), planTimeout)
	defer cancel()
	c, _ := s.source.Configuration(ctx)
	check, err := s.source.CheckConfiguration(ctx, text)
	p := page{Title: "Configuration", CSRF: sess.csrf, Config: c, Check: check, EditText: string(text)}
	if err != nil {
		p.Banner = "The edited configuration could not be checked: " + err.Error()
	}
	code := http.StatusOK
	if check != nil && !check.Valid() {
		code = http.StatusUnprocessableEntity
	}
	s.render(w, code, "config", p)
}

// configApply writes the checked copy over the file and installs it, once
// the operator confirmed the diff; the copy must be the one checked.
func (s *Server) configApply(w http.ResponseWriter, r *http.Request, sess *session) {
	text, err := editedText(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	refuse := func(msg string) {
		s.render(w, http.StatusConflict, "config", page{Title: "Configuration", CSRF: sess.csrf, EditText: string(text), Banner: "Nothing was applied: " + msg})
	}
	switch {
	case r.PostFormValue("confirm") != "yes":
		refuse("tick the box that confirms the changes shown, then apply.")
		return
	case r.PostFormValue("digest") != Digest(text):
		refuse("the text is not the one that was checked. Check it again, read the changes, then apply.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	c, err := s.source.Configuration(ctx)
	cancel()
	if err == nil && c != nil && c.Redacted {
		refuse(c.Path + " holds values shaped like secrets, hidden on these pages: edit it in an editor and run 'onprem install'.")
		return
	}
	s.startOp(w, r, sess, "install", "Install of the edited configuration", func(ctx context.Context, p Progress) error {
		return s.source.ApplyConfiguration(ctx, text, p)
	})
}

// supportPage lists the backups in the configured bucket and offers a
// support bundle.
func (s *Server) supportPage(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	b, err := s.source.Backups(ctx)
	p := page{Title: "Support and backups", CSRF: sess.csrf, Backups: b}
	if err != nil {
		p.BackupsError = err.Error()
	}
	s.render(w, http.StatusOK, "support", p)
}

// supportDownload writes a support bundle (as 'onprem support-bundle':
// redacted) and sends it as a download.
func (s *Server) supportDownload(w http.ResponseWriter, r *http.Request, sess *session) {
	dir, err := os.MkdirTemp(s.tmp, "onprem-console-support-")
	if err != nil {
		http.Error(w, "a folder for the support bundle: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(r.Context(), supportTimeout)
	defer cancel()
	path, err := s.source.SupportBundle(ctx, dir)
	if err != nil {
		s.render(w, http.StatusOK, "support", page{Title: "Support and backups", CSRF: sess.csrf, Banner: "The support bundle could not be written: " + err.Error()})
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	name := filepath.Base(path)
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	if fi, err := f.Stat(); err == nil {
		w.Header().Set("Content-Length", fmt.Sprint(fi.Size()))
	}
	if _, err := io.Copy(w, f); err != nil {
		s.log.Warn("console: sending a support bundle", "error", err)
	}
}
