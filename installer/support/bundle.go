package support

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/snapshot"
)

// Files a bundle adds to the snapshot's.
const (
	FileSummary  = "summary.txt"
	FileIndex    = "index.json"
	FileFindings = "findings.json"
)

// maxBundleFile bounds one file read back from a bundle, and maxBundle
// the whole (a bundle is small: logs are bounded when collected).
const (
	maxBundleFile = 64 << 20
	maxBundle     = 1 << 30
)

// IndexEntry describes one file of a bundle.
type IndexEntry struct {
	Path     string `json:"path"`
	Size     int    `json:"size"`
	SHA256   string `json:"sha256"`
	Describe string `json:"describe"`
}

// Index is index.json.
type Index struct {
	Format    int          `json:"format"`
	Onprem    string       `json:"onprem"`
	Collected time.Time    `json:"collected"`
	Files     []IndexEntry `json:"files"`
}

// FormatVersion is the bundle layout's version.
const FormatVersion = 1

// Result says what was written.
type Result struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Files    int    `json:"files"`
	Errors   int    `json:"errors"`
	Warnings int    `json:"warnings"`
	// Skipped are the collectors' notes on what was not collected.
	Skipped []string `json:"skipped,omitempty"`
}

// Write writes the bundle of s, with its findings, to file: every file
// through r first. It writes FILE.partial and renames it when complete,
// so an interrupted write never leaves a file that looks whole.
func Write(file string, s *snapshot.Snapshot, rep *doctor.Report, r *Redactor) (*Result, error) {
	files, err := s.Files()
	if err != nil {
		return nil, err
	}
	fj, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	files = append(files,
		snapshot.File{Path: FileFindings, Data: append(fj, '\n'), Describe: "the analyzers' findings: severity, evidence, remediation ('onprem support-bundle analyze' reads the bundle again)"},
		snapshot.File{Path: FileSummary, Data: []byte(Summary(s, rep)), Describe: "a summary for humans: the installation, its components, the findings, what was not collected"})
	idx := Index{Format: FormatVersion, Onprem: s.Meta.Onprem, Collected: s.Meta.CollectedAt}
	for i := range files {
		files[i].Data = []byte(r.Redact(string(files[i].Data)))
		sum := sha256.Sum256(files[i].Data)
		idx.Files = append(idx.Files, IndexEntry{Path: files[i].Path, Size: len(files[i].Data), SHA256: hex.EncodeToString(sum[:]), Describe: files[i].Describe})
	}
	ij, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return nil, err
	}
	files = append(files, snapshot.File{Path: FileIndex, Data: append(ij, '\n')})

	root := bundleRoot(s)
	partial := file + ".partial"
	f, err := os.OpenFile(partial, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("writing the support bundle: %w", err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(partial)
		}
	}()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	mtime := s.Meta.CollectedAt
	for _, fl := range files {
		if err := tw.WriteHeader(&tar.Header{Name: root + "/" + fl.Path, Mode: 0o600, Size: int64(len(fl.Data)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return nil, fmt.Errorf("writing %s: %w", partial, err)
		}
		if _, err := tw.Write(fl.Data); err != nil {
			return nil, fmt.Errorf("writing %s: %w", partial, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", partial, err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", partial, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", partial, err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", partial, err)
	}
	if err := os.Rename(partial, file); err != nil {
		return nil, fmt.Errorf("writing the support bundle: %w", err)
	}
	done = true
	res := &Result{Path: file, Size: st.Size(), Files: len(files), Errors: rep.Count(doctor.Error), Warnings: rep.Count(doctor.Warning)}
	for _, c := range s.Meta.Collectors {
		for _, sk := range c.Skipped {
			res.Skipped = append(res.Skipped, c.Name+": "+r.Redact(sk))
		}
	}
	return res, nil
}

// bundleRoot is the folder every file of the bundle is under.
func bundleRoot(s *snapshot.Snapshot) string {
	return "onprem-support-" + s.Meta.CollectedAt.UTC().Format("20060102-150405")
}

// DefaultFileName is the bundle's file name when none is given.
func DefaultFileName(now time.Time) string {
	return "onprem-support-" + now.UTC().Format("20060102-150405") + ".tar.gz"
}

// FormatError says a file is not a support bundle.
type FormatError struct {
	File string
	Err  error
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s is not a support bundle written by 'onprem support-bundle': %v", e.File, e.Err)
}

func (e *FormatError) Unwrap() error { return e.Err }

// Open reads a bundle's files, by their path under the bundle's folder.
func Open(file string) (map[string][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading the support bundle: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, &FormatError{File: file, Err: err}
	}
	tr := tar.NewReader(gz)
	out := map[string][]byte{}
	total := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &FormatError{File: file, Err: err}
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		_, rel, ok := strings.Cut(path.Clean(h.Name), "/")
		if !ok || h.Size > maxBundleFile {
			return nil, &FormatError{File: file, Err: fmt.Errorf("unexpected entry %s", h.Name)}
		}
		total += int(h.Size)
		if total > maxBundle {
			return nil, &FormatError{File: file, Err: errors.New("larger than 1 GiB")}
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, &FormatError{File: file, Err: err}
		}
		out[rel] = b
	}
	if _, ok := out[FileIndex]; !ok {
		return nil, &FormatError{File: file, Err: errors.New(FileIndex + " is missing")}
	}
	return out, nil
}

// Read opens a bundle and reads its snapshot back.
func Read(file string) (*snapshot.Snapshot, error) {
	files, err := Open(file)
	if err != nil {
		return nil, err
	}
	s, err := snapshot.FromFiles(files)
	if err != nil {
		return nil, &FormatError{File: file, Err: err}
	}
	return s, nil
}
