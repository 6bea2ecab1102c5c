package backupfile

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"

	"filippo.io/age"
)

// maxSmallEntry bounds the header, the manifest and every entry written in
// one piece that a Reader holds in memory.
const maxSmallEntry = 64 << 20

// Reader reads a backup entry by entry, in file order, checking every
// entry against the manifest. Without an expected manifest (a first read),
// the checks happen when the manifest, the last entry, is reached: only a
// read to the end (Next returning io.EOF) proves the backup whole. With one
// (ReadOptions.Expect: a second read of a file already verified), every
// entry is checked as soon as it was read.
type Reader struct {
	tr      *tar.Reader
	hdr     Header
	expect  *Manifest
	pending *tar.Header // a header read ahead by a part reader
	seen    []Entry     // entries read, with their computed size and sum
	current *entryReader
	m       *Manifest
	err     error
}

// ReadOptions tune a Reader.
type ReadOptions struct {
	// Expect is the manifest of an earlier full read of the same backup:
	// entries are then checked against it as they are read.
	Expect *Manifest
}

// NewReader decrypts src with identities and reads the header. It returns
// a *KeyError when no identity can decrypt the file, a *CorruptError when
// it is not a whole backup, and a *FormatError when its format is newer
// than this onprem reads.
func NewReader(src io.Reader, identities []age.Identity, o ReadOptions) (*Reader, error) {
	if len(identities) == 0 {
		return nil, errors.New("backup: no identity or passphrase to decrypt with (give --identity, --passphrase-file or ONPREM_BACKUP_PASSPHRASE)")
	}
	plain, err := age.Decrypt(src, identities...)
	if err != nil {
		if known := classify("", err); known != nil {
			return nil, known
		}
		return nil, &CorruptError{Reason: "decrypting it", Err: err}
	}
	r := &Reader{tr: tar.NewReader(plain), expect: o.Expect}
	th, err := r.tr.Next()
	if err != nil {
		return nil, r.fail("", "it has no header entry", err)
	}
	if th.Name != HeaderName {
		return nil, r.fail("", fmt.Sprintf("its first entry is %q, not %s: it is not an onprem backup", th.Name, HeaderName), nil)
	}
	data, err := readSmall(r.tr, th)
	if err != nil {
		return nil, r.fail(HeaderName, "reading the header", err)
	}
	if err := json.Unmarshal(data, &r.hdr); err != nil {
		return nil, r.fail(HeaderName, "the header is not valid JSON", err)
	}
	if r.hdr.Format > FormatVersion {
		return nil, &FormatError{Format: r.hdr.Format, Installer: r.hdr.Installer}
	}
	if r.hdr.Format < 1 {
		return nil, r.fail(HeaderName, fmt.Sprintf("format %d is not one onprem wrote", r.hdr.Format), nil)
	}
	return r, nil
}

// Header returns the backup's header.
func (r *Reader) Header() Header { return r.hdr }

// Next returns the next entry and a reader of its content. The content of
// the previous entry, if not read to its end, is read and checked first.
// After the last entry Next returns io.EOF, once the manifest was read and
// every entry matched it; Manifest then returns it.
func (r *Reader) Next() (Entry, io.Reader, error) {
	if r.err != nil {
		return Entry{}, nil, r.err
	}
	if r.current != nil {
		if _, err := io.Copy(io.Discard, r.current); err != nil {
			return Entry{}, nil, r.setErr(err)
		}
		r.current = nil
	}
	th := r.pending
	r.pending = nil
	if th == nil {
		var err error
		if th, err = r.tr.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return Entry{}, nil, r.setErr(r.fail("", "it ends before its manifest (truncated)", nil))
			}
			return Entry{}, nil, r.setErr(r.fail("", "reading the next entry", err))
		}
	}
	if th.Typeflag != tar.TypeReg {
		return Entry{}, nil, r.setErr(r.fail(th.Name, "not a regular file", nil))
	}
	if th.Name == ManifestName {
		return Entry{}, nil, r.setErr(r.finish(th))
	}
	name, part, isPart := splitPart(th.Name)
	if !isPart {
		name = th.Name
	} else if part != 0 {
		return Entry{}, nil, r.setErr(r.fail(th.Name, "a part without the parts before it", nil))
	}
	if err := validName(name); err != nil {
		return Entry{}, nil, r.setErr(r.fail(th.Name, err.Error(), nil))
	}
	for _, s := range r.seen {
		if s.Name == name {
			return Entry{}, nil, r.setErr(r.fail(name, "the entry appears twice", nil))
		}
	}
	e := Entry{Name: name}
	if r.expect != nil {
		want := r.expect.Entry(name)
		if want == nil {
			return Entry{}, nil, r.setErr(r.fail(name, "the entry is not in the manifest of the earlier read", nil))
		}
		e = *want
	}
	er := &entryReader{r: r, name: name, streamed: isPart, h: sha256.New(), cur: io.LimitReader(r.tr, th.Size)}
	if isPart {
		er.parts = 1
	}
	r.current = er
	return e, er, nil
}

// Manifest returns the manifest once Next returned io.EOF, else nil.
func (r *Reader) Manifest() *Manifest { return r.m }

// Verify reads the whole backup and returns its manifest when every entry
// matches it. small is called with each entry written in one piece and its
// content (it may keep the slice).
func Verify(src io.Reader, identities []age.Identity, small func(Entry, []byte) error) (*Manifest, error) {
	r, err := NewReader(src, identities, ReadOptions{})
	if err != nil {
		return nil, err
	}
	for {
		e, content, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r.Manifest(), nil
		}
		if err != nil {
			return nil, err
		}
		er := content.(*entryReader)
		if er.streamed || small == nil {
			continue // Next reads and checks it
		}
		data, err := io.ReadAll(io.LimitReader(content, maxSmallEntry+1))
		if err != nil {
			return nil, err
		}
		if len(data) > maxSmallEntry {
			return nil, r.fail(e.Name, "an entry written in one piece is larger than 64 MiB", nil)
		}
		if err := small(e, data); err != nil {
			return nil, err
		}
	}
}

// entryReader reads one entry's content: the tar entry itself, or its
// parts one after another. At the end it records the entry's size and sum
// and, with an expected manifest, checks them.
type entryReader struct {
	r        *Reader
	name     string
	streamed bool
	parts    int
	h        hash.Hash
	size     int64
	cur      io.Reader
	done     bool
}

func (e *entryReader) Read(p []byte) (int, error) {
	if e.done {
		return 0, io.EOF
	}
	for {
		n, err := e.cur.Read(p)
		if n > 0 {
			e.h.Write(p[:n])
			e.size += int64(n)
			return n, nil
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, io.EOF) {
			return 0, e.r.setErr(e.r.fail(e.name, "reading its content", err))
		}
		if e.streamed {
			more, err := e.nextPart()
			if err != nil {
				return 0, e.r.setErr(err)
			}
			if more {
				continue
			}
		}
		return 0, e.end()
	}
}

// nextPart moves to the entry's next part, or reports that there is none
// (keeping the header it read for Reader.Next).
func (e *entryReader) nextPart() (bool, error) {
	th, err := e.r.tr.Next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return false, e.r.fail(e.name, "it ends before its manifest (truncated)", nil)
		}
		return false, e.r.fail(e.name, "reading its next part", err)
	}
	name, part, ok := splitPart(th.Name)
	if !ok || name != e.name {
		e.r.pending = th
		return false, nil
	}
	if part != e.parts {
		return false, e.r.fail(e.name, fmt.Sprintf("part %d follows part %d", part, e.parts-1), nil)
	}
	e.parts++
	e.cur = io.LimitReader(e.r.tr, th.Size)
	return true, nil
}

// end records the entry and checks it against the expected manifest.
func (e *entryReader) end() error {
	e.done = true
	got := Entry{Name: e.name, Size: e.size, SHA256: hex.EncodeToString(e.h.Sum(nil))}
	if e.streamed {
		got.Parts = e.parts
	}
	e.r.seen = append(e.r.seen, got)
	if e.r.expect != nil {
		if err := match(e.r.expect.Entry(e.name), got); err != nil {
			return e.r.setErr(err)
		}
	}
	return io.EOF
}

// finish reads the manifest and checks every entry read against it.
func (r *Reader) finish(th *tar.Header) error {
	data, err := readSmall(r.tr, th)
	if err != nil {
		return r.fail(ManifestName, "reading the manifest", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return r.fail(ManifestName, "the manifest is not valid JSON", err)
	}
	if len(m.Entries) != len(r.seen) {
		return r.fail(ManifestName, fmt.Sprintf("the manifest lists %d entries, the file holds %d", len(m.Entries), len(r.seen)), nil)
	}
	for i, got := range r.seen {
		if m.Entries[i].Name != got.Name {
			return r.fail(got.Name, fmt.Sprintf("the manifest lists %s at this place", m.Entries[i].Name), nil)
		}
		if err := match(&m.Entries[i], got); err != nil {
			return err
		}
	}
	if m.Format != r.hdr.Format || m.Version != r.hdr.Version || m.Installation != r.hdr.Installation {
		return r.fail(ManifestName, "the manifest does not match the header", nil)
	}
	if r.expect != nil && (r.expect.Finished != m.Finished || len(r.expect.Entries) != len(m.Entries)) {
		return r.fail(ManifestName, "the manifest differs from the earlier read: the file changed meanwhile", nil)
	}
	// Nothing may follow the manifest.
	if th, err := r.tr.Next(); err == nil {
		return r.fail(th.Name, "an entry after the manifest", nil)
	} else if !errors.Is(err, io.EOF) {
		return r.fail(ManifestName, "after the manifest", err)
	}
	r.m = &m
	return io.EOF
}

func match(want *Entry, got Entry) error {
	if want == nil {
		return &CorruptError{Entry: got.Name, Reason: "the entry is not in the manifest"}
	}
	if want.Size != got.Size || want.SHA256 != got.SHA256 || want.Parts != got.Parts {
		return &CorruptError{Entry: got.Name, Reason: fmt.Sprintf("its content does not match the manifest (size %d, sha256 %s; the manifest says size %d, sha256 %s)",
			got.Size, short(got.SHA256), want.Size, short(want.SHA256))}
	}
	return nil
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

func readSmall(tr *tar.Reader, th *tar.Header) ([]byte, error) {
	if th.Size > maxSmallEntry {
		return nil, fmt.Errorf("%d bytes, more than the %d allowed", th.Size, maxSmallEntry)
	}
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(tr, th.Size)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (r *Reader) setErr(err error) error {
	if r.err == nil && !errors.Is(err, io.EOF) {
		r.err = err
	}
	if errors.Is(err, io.EOF) {
		r.err = io.EOF
	}
	return err
}

// fail describes a problem found while reading entry: a failure of the
// decryption (wrong key, truncated, changed) is reported as such, anything
// else with reason.
func (r *Reader) fail(entry, reason string, err error) error {
	if err != nil {
		if known := classify(entry, err); known != nil {
			return known
		}
	}
	return &CorruptError{Entry: entry, Reason: reason, Err: err}
}

// classify turns an error of the decryption into a *KeyError or a
// *CorruptError, or returns nil when err is not one it knows.
func classify(entry string, err error) error {
	var nm *age.NoIdentityMatchError
	if errors.As(err, &nm) {
		return &KeyError{Stanzas: nm.StanzaTypes, Err: err}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &CorruptError{Entry: entry, Reason: "the file is truncated"}
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "authenticate"):
		return &CorruptError{Entry: entry, Reason: "the file was changed or truncated (the encryption's authentication failed)"}
	case strings.Contains(msg, "header"):
		return &CorruptError{Entry: entry, Reason: "it is not an age-encrypted onprem backup, or its header was changed", Err: err}
	}
	return nil
}
