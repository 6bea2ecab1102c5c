package backupfile

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
)

type fixture struct {
	file  []byte
	small map[string][]byte
	big   []byte
	m     *Manifest
}

// write makes a backup with two small entries, one streamed entry of more
// than two parts and one empty streamed entry.
func write(t *testing.T, rcp []age.Recipient) fixture {
	t.Helper()
	f := fixture{small: map[string][]byte{
		"config/onprem.yaml": []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\n"),
		"state.json":         []byte(`{"version":"2.7.1"}`),
	}}
	f.big = make([]byte, 2*PartSize+12345)
	if _, err := rand.Read(f.big); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, rcp, Header{Installation: "onprem", Namespace: "onprem", Version: "2.7.1", Installer: "0.1.0", Trigger: TriggerManual, Components: []string{"mongodb"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"config/onprem.yaml", "state.json"} {
		if _, err := w.Add(Entry{Name: n, Kind: KindConfig}, f.small[n]); err != nil {
			t.Fatal(err)
		}
	}
	e, err := w.AddStream(Entry{Name: "databases/mongodb/pipelines_api.archive", Kind: KindDatabase, Engine: "mongodb", Database: "pipelines_api"}, bytes.NewReader(f.big))
	if err != nil {
		t.Fatal(err)
	}
	if e.Parts != 3 || e.Size != int64(len(f.big)) {
		t.Fatalf("streamed entry: %d parts, %d bytes; want 3 parts, %d bytes", e.Parts, e.Size, len(f.big))
	}
	if _, err := w.AddStream(Entry{Name: "databases/postgresql/empty.pgdump", Kind: KindDatabase}, strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if f.m, err = w.Close(); err != nil {
		t.Fatal(err)
	}
	f.file = buf.Bytes()
	return f
}

func newKey(t *testing.T) (*age.HybridIdentity, []age.Recipient) {
	t.Helper()
	id, err := age.GenerateHybridIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id, []age.Recipient{id.Recipient()}
}

func TestRoundTrip(t *testing.T) {
	id, rcp := newKey(t)
	f := write(t, rcp)
	if bytes.Contains(f.file, f.small["config/onprem.yaml"]) || bytes.Contains(f.file, []byte("pipelines_api")) {
		t.Fatal("the file holds plain text of its entries")
	}
	got := map[string][]byte{}
	m, err := Verify(bytes.NewReader(f.file), []age.Identity{id}, func(e Entry, data []byte) error {
		got[e.Name] = data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Entries) != 4 || m.Version != "2.7.1" || m.Format != FormatVersion || m.Finished.IsZero() {
		t.Fatalf("manifest: %+v", m)
	}
	for n, want := range f.small {
		if !bytes.Equal(got[n], want) {
			t.Fatalf("entry %s: %q, want %q", n, got[n], want)
		}
	}
	// A second read against the first one's manifest streams the big entry.
	r, err := NewReader(bytes.NewReader(f.file), []age.Identity{id}, ReadOptions{Expect: m})
	if err != nil {
		t.Fatal(err)
	}
	if h := r.Header(); h.Installation != "onprem" || h.Trigger != TriggerManual {
		t.Fatalf("header: %+v", h)
	}
	var names []string
	for {
		e, content, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, e.Name)
		if e.Kind != KindDatabase || e.Engine != "mongodb" {
			continue
		}
		data, err := io.ReadAll(content)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, f.big) {
			t.Fatal("the streamed entry read back differs")
		}
	}
	if strings.Join(names, ",") != "config/onprem.yaml,state.json,databases/mongodb/pipelines_api.archive,databases/postgresql/empty.pgdump" {
		t.Fatalf("entries: %v", names)
	}
	if r.Manifest() == nil {
		t.Fatal("no manifest after the last entry")
	}
}

func TestPassphrase(t *testing.T) {
	k := Keys{Passphrase: "correct horse battery staple", ScryptWorkFactor: 10}
	rcp, err := k.EncryptTo()
	if err != nil {
		t.Fatal(err)
	}
	f := write(t, rcp)
	ids, _ := k.DecryptWith()
	if _, err := Verify(bytes.NewReader(f.file), ids, nil); err != nil {
		t.Fatal(err)
	}
	wrong, _ := Keys{Passphrase: "wrong"}.DecryptWith()
	_, err = Verify(bytes.NewReader(f.file), wrong, nil)
	var ke *KeyError
	if !errors.As(err, &ke) {
		t.Fatalf("a wrong passphrase: %v, want a *KeyError", err)
	}
}

func TestRefusals(t *testing.T) {
	id, rcp := newKey(t)
	f := write(t, rcp)
	other, _ := newKey(t)

	_, err := Verify(bytes.NewReader(f.file), []age.Identity{other}, nil)
	var ke *KeyError
	if !errors.As(err, &ke) || !strings.Contains(err.Error(), "another key") {
		t.Fatalf("another key: %v", err)
	}

	headerEnd := bytes.Index(f.file, []byte("\n---"))
	if headerEnd < 0 {
		t.Fatal("no age header end")
	}
	payload := headerEnd + 48 // past the MAC line and the nonce
	for _, cut := range []int{payload + 10, len(f.file) / 2, len(f.file) - 1, len(f.file) - 200} {
		_, err := Verify(bytes.NewReader(f.file[:cut]), []age.Identity{id}, nil)
		var ce *CorruptError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "truncated") { // mid-chunk: authentication fails; at a chunk boundary: EOF
			t.Fatalf("truncated at %d of %d: %v", cut, len(f.file), err)
		}
	}
	for _, at := range []int{payload + 5, len(f.file) / 3, len(f.file) - 20} {
		bad := bytes.Clone(f.file)
		bad[at] ^= 0x01
		_, err := Verify(bytes.NewReader(bad), []age.Identity{id}, nil)
		var ce *CorruptError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "changed") {
			t.Fatalf("a flipped byte at %d: %v", at, err)
		}
	}
	for _, at := range []int{30, headerEnd + 5} {
		bad := bytes.Clone(f.file)
		bad[at] ^= 0x01
		if _, err := Verify(bytes.NewReader(bad), []age.Identity{id}, nil); !IsRefusal(err) {
			t.Fatalf("a flipped byte in the age header at %d: %v", at, err)
		}
	}
	if _, err := Verify(strings.NewReader("not a backup at all"), []age.Identity{id}, nil); !IsRefusal(err) {
		t.Fatalf("not a backup: %v", err)
	}
}

// craft writes an encrypted tar of the given files, as another (or a
// broken) writer would.
func craft(t *testing.T, rcp []age.Recipient, files ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := age.Encrypt(&buf, rcp...)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(enc)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o600, Size: int64(len(f[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	enc.Close()
	return buf.Bytes()
}

func TestNewerFormatIsRefusedBeforeAnythingElse(t *testing.T) {
	id, rcp := newKey(t)
	h, _ := json.Marshal(Header{Format: FormatVersion + 1, Installer: "9.0.0"})
	file := craft(t, rcp, [2]string{HeaderName, string(h)}, [2]string{"state.json", "{}"})
	_, err := Verify(bytes.NewReader(file), []age.Identity{id}, nil)
	var fe *FormatError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "onprem 9.0.0 or later") {
		t.Fatalf("a newer format: %v", err)
	}
}

func TestEntriesMustMatchTheManifest(t *testing.T) {
	id, rcp := newKey(t)
	h, _ := json.Marshal(Header{Format: FormatVersion, Installer: "0.1.0", Version: "2.7.1"})
	good := Manifest{Header: Header{Format: FormatVersion, Installer: "0.1.0", Version: "2.7.1"}, Finished: time.Now(),
		Entries: []Entry{{Name: "state.json", Size: 2, SHA256: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}}}
	m, _ := json.Marshal(good)
	if _, err := Verify(bytes.NewReader(craft(t, rcp, [2]string{HeaderName, string(h)}, [2]string{"state.json", "{}"}, [2]string{ManifestName, string(m)})), []age.Identity{id}, nil); err != nil {
		t.Fatalf("a well-formed crafted backup: %v", err)
	}
	cases := map[string][]byte{
		"content changed":  craft(t, rcp, [2]string{HeaderName, string(h)}, [2]string{"state.json", "[]"}, [2]string{ManifestName, string(m)}),
		"no manifest":      craft(t, rcp, [2]string{HeaderName, string(h)}, [2]string{"state.json", "{}"}),
		"entry not listed": craft(t, rcp, [2]string{HeaderName, string(h)}, [2]string{"state.json", "{}"}, [2]string{"extra", "x"}, [2]string{ManifestName, string(m)}),
		"after manifest":   craft(t, rcp, [2]string{HeaderName, string(h)}, [2]string{"state.json", "{}"}, [2]string{ManifestName, string(m)}, [2]string{"late", "x"}),
		"no header":        craft(t, rcp, [2]string{"state.json", "{}"}),
		"part out of line": craft(t, rcp, [2]string{HeaderName, string(h)}, [2]string{"d.part-000001", "x"}, [2]string{ManifestName, string(m)}),
	}
	for name, file := range cases {
		_, err := Verify(bytes.NewReader(file), []age.Identity{id}, nil)
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Errorf("%s: %v, want a *CorruptError", name, err)
		}
	}
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	res, err := Keygen(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Recipient, "age1pq1") {
		t.Fatalf("recipient %s is not post-quantum", res.Recipient)
	}
	if st, err := os.Stat(res.IdentityFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("identity file: %v %v", st, err)
	}
	if _, err := Keygen(dir); err == nil || !strings.Contains(err.Error(), "never overwrites") {
		t.Fatalf("a second keygen into the same folder: %v", err)
	}
	rcp, err := Keys{RecipientFiles: []string{res.RecipientFile}}.EncryptTo()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := Keys{IdentityFiles: []string{res.IdentityFile}}.DecryptWith()
	if err != nil {
		t.Fatal(err)
	}
	f := write(t, rcp)
	if _, err := Verify(bytes.NewReader(f.file), ids, nil); err != nil {
		t.Fatal(err)
	}
	secret, _ := os.ReadFile(res.IdentityFile)
	line := strings.TrimSpace(string(secret[bytes.LastIndex(bytes.TrimSpace(secret), []byte("\n"))+1:]))
	if _, err := (Keys{Recipients: []string{line}}).EncryptTo(); err == nil || !strings.Contains(err.Error(), "private key") {
		t.Fatalf("a private key given as recipient: %v", err)
	}
	if _, err := (Keys{Recipients: []string{"age1notakey"}}).EncryptTo(); err == nil {
		t.Fatal("a malformed recipient was accepted")
	}
	classic, _ := age.GenerateX25519Identity()
	if _, err := (Keys{Recipients: []string{res.Recipient, classic.Recipient().String()}}).EncryptTo(); err == nil || !strings.Contains(err.Error(), "mix") {
		t.Fatalf("mixed recipients: %v", err)
	}
	if _, err := (Keys{}).EncryptTo(); err == nil {
		t.Fatal("no recipient was accepted")
	}
	if _, err := (Keys{}).DecryptWith(); err == nil {
		t.Fatal("no identity was accepted")
	}
}

// BenchmarkVerify reads and checks a backup of 64 MiB of incompressible
// data: what a restore does once before it changes anything.
func BenchmarkVerify(b *testing.B) {
	id, err := age.GenerateHybridIdentity()
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 64<<20)
	_, _ = rand.Read(data)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, []age.Recipient{id.Recipient()}, Header{Installation: "onprem", Version: "2.8.0"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.AddStream(Entry{Name: "databases/x", Kind: KindDatabase}, bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		b.Fatal(err)
	}
	file := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := Verify(bytes.NewReader(file), []age.Identity{id}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrite writes a backup of 64 MiB of incompressible data.
func BenchmarkWrite(b *testing.B) {
	id, err := age.GenerateHybridIdentity()
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 64<<20)
	_, _ = rand.Read(data)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		w, err := NewWriter(io.Discard, []age.Recipient{id.Recipient()}, Header{Installation: "onprem", Version: "2.8.0"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.AddStream(Entry{Name: "databases/x", Kind: KindDatabase}, bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
		if _, err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
