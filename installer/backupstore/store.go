// Package backupstore keeps backup files at a destination: a folder on the
// operator's machine (Dir) or an S3-compatible bucket (S3). Every
// destination writes a backup under a temporary name (a folder) or as a
// multipart upload (a bucket) and makes it visible under its name only
// when Commit is called after the last byte: a backup cut short by an
// error, a full disk or a kill never looks complete.
package backupstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"onprem.dev/onprem/installer/backupfile"
)

// Object is one backup at a destination.
type Object struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// Store is a destination of backups.
type Store interface {
	// String says where the destination is, for messages (never with
	// credentials).
	String() string
	// Create starts writing the backup name; it is visible only after
	// Commit. A name that exists is refused.
	Create(ctx context.Context, name string) (Upload, error)
	// Open reads the backup name; size is its length.
	Open(ctx context.Context, name string) (r io.ReadCloser, size int64, err error)
	// List returns the backups (names ending in backupfile.Extension),
	// oldest name first.
	List(ctx context.Context) ([]Object, error)
	// Delete removes the backup name; a name that does not exist is not
	// an error.
	Delete(ctx context.Context, name string) error
}

// Upload is a backup being written.
type Upload interface {
	io.Writer
	// Commit makes the backup visible under its name once every byte was
	// written.
	Commit() error
	// Abort discards what was written. It is safe after Commit (it then
	// does nothing).
	Abort()
}

// NotFoundError: the named backup is not at the destination.
type NotFoundError struct {
	Name, Where string
	// Available are the backups that are there.
	Available []string
}

func (e *NotFoundError) Error() string {
	msg := fmt.Sprintf("backup %s is not at %s", e.Name, e.Where)
	switch {
	case len(e.Available) == 0:
		msg += " (it holds no backup)"
	case len(e.Available) <= 10:
		msg += "; it holds: " + strings.Join(e.Available, ", ")
	default:
		msg += fmt.Sprintf("; it holds %d backups, the newest %s ('onprem backup list' shows them)", len(e.Available), e.Available[len(e.Available)-1])
	}
	return msg
}

// ExistsError: a backup of that name is already at the destination.
type ExistsError struct{ Name, Where string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("backup %s already exists at %s: onprem never overwrites a backup", e.Name, e.Where)
}

// Name returns the name of a new backup of installation made at t:
// INSTALLATION-YYYYMMDDTHHMMSSZ.onprem-backup, which sorts by time.
func Name(installation string, t time.Time) string {
	return installation + "-" + t.UTC().Format("20060102T150405Z") + backupfile.Extension
}

// Of returns the backups of installation among objs, oldest first.
func Of(installation string, objs []Object) []Object {
	var out []Object
	for _, o := range objs {
		if _, inst, ok := parseName(o.Name); ok && inst == installation {
			out = append(out, o)
		}
	}
	return out
}

// Latest returns the newest backup of installation, or, when installation
// is empty, the newest of every installation's (by the time in its name),
// or a *NotFoundError.
func Latest(ctx context.Context, s Store, installation string) (Object, error) {
	objs, err := s.List(ctx)
	if err != nil {
		return Object{}, err
	}
	var newest Object
	var newestAt time.Time
	for _, o := range objs {
		at, inst, ok := parseName(o.Name)
		if !ok || (installation != "" && inst != installation) {
			continue
		}
		if newest.Name == "" || at.After(newestAt) {
			newest, newestAt = o, at
		}
	}
	if newest.Name == "" {
		what := "any backup"
		if installation != "" {
			what = "a backup of installation " + installation
		}
		return Object{}, &NotFoundError{Name: what, Where: s.String(), Available: names(objs)}
	}
	return newest, nil
}

// parseName reads INSTALLATION-YYYYMMDDTHHMMSSZ.onprem-backup.
func parseName(name string) (time.Time, string, bool) {
	base, ok := strings.CutSuffix(name, backupfile.Extension)
	i := strings.LastIndex(base, "-")
	if !ok || i <= 0 {
		return time.Time{}, "", false
	}
	at, err := time.Parse("20060102T150405Z", base[i+1:])
	if err != nil {
		return time.Time{}, "", false
	}
	return at, base[:i], true
}

// Prune deletes the oldest backups of installation so that keep remain,
// never the one named protect, and returns the names it deleted.
func Prune(ctx context.Context, s Store, installation string, keep int, protect string) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	objs, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	mine := Of(installation, objs)
	var deleted []string
	var errs []error
	for i := 0; i < len(mine)-keep; i++ {
		if mine[i].Name == protect {
			continue
		}
		if err := s.Delete(ctx, mine[i].Name); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, mine[i].Name)
	}
	return deleted, errors.Join(errs...)
}

// checkName refuses names that are not a plain backup file name.
func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, backupfile.Extension) {
		return fmt.Errorf("%q is not a backup name (NAME%s, as 'onprem backup list' shows)", name, backupfile.Extension)
	}
	return nil
}

func names(objs []Object) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Name)
	}
	return out
}

func sortObjects(objs []Object) {
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
}
