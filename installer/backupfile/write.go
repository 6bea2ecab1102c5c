package backupfile

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"filippo.io/age"
)

// Writer writes one backup: NewWriter writes the header, Add and AddStream
// the entries, Close the manifest. Nothing of the file is usable until
// Close returned nil: a caller that fails midway discards what was written
// (the destinations write under a temporary name and commit on success).
type Writer struct {
	enc     io.WriteCloser
	tw      *tar.Writer
	m       Manifest
	names   map[string]bool
	modTime time.Time
	buf     []byte
	closed  bool
}

// NewWriter starts a backup on dst, encrypted to recipients (at least
// one), and writes h as its first entry. h.Format is set to FormatVersion.
func NewWriter(dst io.Writer, recipients []age.Recipient, h Header) (*Writer, error) {
	if len(recipients) == 0 {
		return nil, errors.New("backup: no recipient to encrypt to (give --recipient, --recipient-file or a passphrase)")
	}
	h.Format = FormatVersion
	if h.Created.IsZero() {
		h.Created = time.Now().UTC()
	}
	enc, err := age.Encrypt(dst, recipients...)
	if err != nil {
		return nil, fmt.Errorf("backup: encrypting: %w", err)
	}
	w := &Writer{enc: enc, tw: tar.NewWriter(enc), m: Manifest{Header: h}, names: map[string]bool{}, modTime: h.Created.Truncate(time.Second)}
	data, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := w.writeFile(HeaderName, data); err != nil {
		return nil, err
	}
	return w, nil
}

// Header returns the backup's header.
func (w *Writer) Header() Header { return w.m.Header }

// Add writes a small entry in one piece. e.Size and e.SHA256 are computed.
func (w *Writer) Add(e Entry, data []byte) (Entry, error) {
	if err := w.check(e.Name); err != nil {
		return Entry{}, err
	}
	if err := w.writeFile(e.Name, data); err != nil {
		return Entry{}, err
	}
	sum := sha256.Sum256(data)
	e.Size, e.Parts, e.SHA256 = int64(len(data)), 0, hex.EncodeToString(sum[:])
	w.m.Entries = append(w.m.Entries, e)
	return e, nil
}

// AddStream writes an entry read from r until EOF, in parts of at most
// PartSize bytes (an empty stream is one empty part). It returns the entry
// with its size, parts and checksum. An error from r is returned as it is;
// the backup must then be abandoned.
func (w *Writer) AddStream(e Entry, r io.Reader) (Entry, error) {
	if err := w.check(e.Name); err != nil {
		return Entry{}, err
	}
	if w.buf == nil {
		w.buf = make([]byte, PartSize)
	}
	h := sha256.New()
	var size int64
	part := 0
	for {
		n, err := io.ReadFull(r, w.buf)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return Entry{}, err
		}
		if n > 0 || part == 0 {
			if werr := w.writeFile(partName(e.Name, part), w.buf[:n]); werr != nil {
				return Entry{}, werr
			}
			h.Write(w.buf[:n])
			size += int64(n)
			part++
		}
		if err != nil { // EOF or a short last part
			break
		}
	}
	e.Size, e.Parts, e.SHA256 = size, part, hex.EncodeToString(h.Sum(nil))
	w.m.Entries = append(w.m.Entries, e)
	return e, nil
}

// Close writes the manifest and finishes the encryption. It does not close
// the underlying writer. The returned manifest is the one written.
func (w *Writer) Close() (*Manifest, error) {
	if w.closed {
		return nil, errors.New("backup: already closed")
	}
	w.closed = true
	w.m.Finished = time.Now().UTC()
	data, err := json.MarshalIndent(w.m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := w.writeFile(ManifestName, data); err != nil {
		return nil, err
	}
	if err := w.tw.Close(); err != nil {
		return nil, fmt.Errorf("backup: finishing the archive: %w", err)
	}
	if err := w.enc.Close(); err != nil {
		return nil, fmt.Errorf("backup: finishing the encryption: %w", err)
	}
	m := w.m
	m.Entries = slices.Clone(m.Entries)
	return &m, nil
}

func (w *Writer) check(name string) error {
	if w.closed {
		return errors.New("backup: already closed")
	}
	if err := validName(name); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if w.names[name] {
		return fmt.Errorf("backup: entry %s written twice", name)
	}
	w.names[name] = true
	return nil
}

func (w *Writer) writeFile(name string, data []byte) error {
	hdr := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), ModTime: w.modTime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := w.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("backup: writing %s: %w", name, err)
	}
	if _, err := w.tw.Write(data); err != nil {
		return fmt.Errorf("backup: writing %s: %w", name, err)
	}
	return nil
}
