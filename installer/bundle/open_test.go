package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// retar rewrites the tar at p through edit (nil result: drop the entry).
func retar(t *testing.T, p string, edit func(name string, data []byte) []byte) {
	t.Helper()
	in, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tr := tar.NewReader(bytes.NewReader(in))
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		data = edit(h.Name, data)
		if data == nil {
			continue
		}
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func largestLayer(t *testing.T, p string) string {
	t.Helper()
	var name string
	var size int64
	for n, e := range tarEntries(t, p) {
		if blobHex(n) != "" && e[1] > size {
			name, size = n, e[1]
		}
	}
	return name
}

func TestBundleFlippedByteIsRefusedNamingTheFile(t *testing.T) {
	f := newFixture(t, 32<<10, 8<<10)
	out := createBundle(t, f, nil)
	victim := largestLayer(t, out)
	e := tarEntries(t, out)[victim]

	fh, err := os.OpenFile(out, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var one [1]byte
	at := e[0] + e[1]/2
	if _, err := fh.ReadAt(one[:], at); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x01
	if _, err := fh.WriteAt(one[:], at); err != nil {
		t.Fatal(err)
	}
	fh.Close()

	for _, check := range []func() error{
		func() error { _, err := Verify(context.Background(), out, OpenOptions{}); return err },
		func() error { b, err := Open(context.Background(), out, OpenOptions{}); closeIf(b); return err },
	} {
		err := check()
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != victim {
			t.Fatalf("err = %v, want a CorruptError naming %s", err, victim)
		}
		if !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "does not match its checksum") {
			t.Errorf("message: %v", err)
		}
	}
	// Inspect does not read contents: it still opens, and says so.
	b, err := Open(context.Background(), out, OpenOptions{SkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if in, err := b.Inspect(); err != nil || in.Verified {
		t.Errorf("inspect: %+v %v", in, err)
	}
}

func closeIf(b *Bundle) {
	if b != nil {
		b.Close()
	}
}

func TestBundleStructuralDamageIsRefused(t *testing.T) {
	f := newFixture(t, 8<<10, 2<<10)
	cases := []struct {
		name, file, want string
		edit             func(string, []byte) []byte
	}{
		{"file removed", "charts/redis/Chart.yaml", "listed in checksums but missing", func(n string, d []byte) []byte {
			if n == "charts/redis/Chart.yaml" {
				return nil
			}
			return d
		}},
		{"file added", "charts/redis/extra.yaml", "not listed in checksums", func(n string, d []byte) []byte { return d }},
		{"no checksums", "", "no checksums file", func(n string, d []byte) []byte {
			if n == checksumsFile {
				return nil
			}
			return d
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := createBundle(t, f, nil)
			retar(t, out, c.edit)
			if c.name == "file added" {
				appendEntry(t, out, "charts/redis/extra.yaml", []byte("x: 1\n"))
			}
			_, err := Verify(context.Background(), out, OpenOptions{})
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.File != c.file || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q about %q", err, c.want, c.file)
			}
		})
	}
	t.Run("truncated", func(t *testing.T) {
		out := createBundle(t, f, nil)
		st, _ := os.Stat(out)
		if err := os.Truncate(out, st.Size()/2); err != nil {
			t.Fatal(err)
		}
		_, err := Verify(context.Background(), out, OpenOptions{})
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Errorf("err = %v, want CorruptError", err)
		}
	})
	t.Run("not a tar", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "x")
		os.WriteFile(p, []byte("hello"), 0o644)
		if _, err := Verify(context.Background(), p, OpenOptions{}); err == nil || !strings.Contains(err.Error(), "not valid") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("path escape", func(t *testing.T) {
		out := createBundle(t, f, nil)
		appendEntry(t, out, "../evil", []byte("x"))
		_, err := Verify(context.Background(), out, OpenOptions{})
		if err == nil || !strings.Contains(err.Error(), "not a valid path") {
			t.Errorf("err = %v", err)
		}
	})
}

// appendEntry adds a file at the end of the tar at p.
func appendEntry(t *testing.T, p, name string, data []byte) {
	t.Helper()
	in, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// Drop the two zero blocks that end the archive, then append.
	var buf bytes.Buffer
	buf.Write(in[:len(in)-1024])
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(data)), Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestBundleSignature(t *testing.T) {
	f := newFixture(t, 8<<10, 2<<10)
	priv, pub := keyPair(t)
	_, otherPub := keyPair(t)
	pk, _ := ParsePublicKey(pub)
	other, _ := ParsePublicKey(otherPub)
	ctx := context.Background()

	signed := createBundle(t, f, priv)
	if r, err := Verify(ctx, signed, OpenOptions{PublicKey: pk}); err != nil || !r.SignatureVerified || r.KeyID != KeyID(pk) {
		t.Fatalf("right key: %+v %v", r, err)
	}
	_, err := Verify(ctx, signed, OpenOptions{PublicKey: other})
	var se *SignatureError
	if !errors.As(err, &se) || se.BundleKeyID != KeyID(pk) || se.KeyID != KeyID(other) ||
		!strings.Contains(err.Error(), "signed with key "+KeyID(pk)) {
		t.Errorf("wrong key: %v", err)
	}
	// Without a key the checksums still verify; the signature is reported
	// as not checked.
	if r, err := Verify(ctx, signed, OpenOptions{}); err != nil || !r.Signed || r.SignatureVerified {
		t.Errorf("no key: %+v %v", r, err)
	}

	unsigned := createBundle(t, f, nil)
	if _, err := Verify(ctx, unsigned, OpenOptions{PublicKey: pk}); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned with a key: %v", err)
	}

	// Someone changes a chart and fixes up the checksums: only the
	// signature catches it.
	sums := map[string]string{}
	retar(t, signed, func(n string, d []byte) []byte {
		if n == "charts/redis/values.yaml" {
			d = append(d, []byte("\n# tampered\n")...)
		}
		if n == checksumsFile {
			return encodeChecksums(sums)
		}
		if n != signatureFile {
			h := sha256.Sum256(d)
			sums[n] = hex.EncodeToString(h[:])
		}
		return d
	})
	if _, err := Verify(ctx, signed, OpenOptions{}); err != nil {
		t.Fatalf("re-summed bundle should pass the checksums: %v", err)
	}
	if _, err := Verify(ctx, signed, OpenOptions{PublicKey: pk}); !errors.As(err, &se) {
		t.Errorf("re-summed bundle with the key: %v, want SignatureError", err)
	}
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	res, err := Keygen(KeygenOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(res.PrivateKey)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v %v", st.Mode(), err)
	}
	sk, err := LoadPrivateKey(res.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := LoadPublicKey(res.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if KeyID(pk) != res.KeyID || !pk.Equal(sk.Public()) {
		t.Error("key pair does not match")
	}
	before, _ := os.ReadFile(res.PrivateKey)
	if _, err := Keygen(KeygenOptions{Dir: dir}); !errors.Is(err, ErrKeyExists) {
		t.Errorf("second keygen: %v", err)
	}
	after, _ := os.ReadFile(res.PrivateKey)
	if !bytes.Equal(before, after) {
		t.Error("private key overwritten without force")
	}
	os.Chmod(res.PrivateKey, 0o644)
	res2, err := Keygen(KeygenOptions{Dir: dir, Force: true})
	if err != nil || res2.KeyID == res.KeyID {
		t.Fatalf("forced keygen: %+v %v", res2, err)
	}
	if st, _ := os.Stat(res.PrivateKey); st.Mode().Perm() != 0o600 {
		t.Errorf("forced private key mode %v", st.Mode())
	}
	onlyFiles(t, dir, PrivateKeyFile, PublicKeyFile)

	// Raw base64 keys are accepted too; garbage is not.
	if _, err := ParsePublicKey([]byte("bm90IGEga2V5")); err == nil {
		t.Error("short public key accepted")
	}
	if _, err := ParsePrivateKey(before[:40]); err == nil {
		t.Error("broken private key accepted")
	}
	if _, err := ParsePublicKey(before); err == nil {
		t.Error("private key accepted as public")
	}
	seed := sk.Seed()
	if k, err := ParsePrivateKey([]byte(b64(seed))); err != nil || !k.Equal(sk) {
		t.Errorf("seed: %v", err)
	}
	if k, err := ParsePublicKey([]byte(b64(pk))); err != nil || !k.Equal(pk) {
		t.Errorf("raw public: %v", err)
	}
}
