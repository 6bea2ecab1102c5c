package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"onprem.dev/onprem/installer/signing"
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
		func() error {
			_, err := Verify(context.Background(), out, OpenOptions{Trust: allowUnsigned})
			return err
		},
		func() error {
			b, err := Open(context.Background(), out, OpenOptions{Trust: allowUnsigned})
			closeIf(b)
			return err
		},
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
			_, err := Verify(context.Background(), out, OpenOptions{Trust: allowUnsigned})
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
		_, err := Verify(context.Background(), out, OpenOptions{Trust: allowUnsigned})
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Errorf("err = %v, want CorruptError", err)
		}
	})
	t.Run("not a tar", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "x")
		os.WriteFile(p, []byte("hello"), 0o644)
		if _, err := Verify(context.Background(), p, OpenOptions{Trust: allowUnsigned}); err == nil || !strings.Contains(err.Error(), "not valid") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("path escape", func(t *testing.T) {
		out := createBundle(t, f, nil)
		appendEntry(t, out, "../evil", []byte("x"))
		_, err := Verify(context.Background(), out, OpenOptions{Trust: allowUnsigned})
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

// retarResummed is retar with the checksums file made to match the edited
// files, as someone who changes a bundle on purpose does (the signature is
// left as it was).
func retarResummed(t *testing.T, p string, edit func(name string, data []byte) []byte) {
	t.Helper()
	sums := map[string]string{}
	retar(t, p, func(n string, d []byte) []byte {
		if n == checksumsFile {
			return encodeChecksums(sums)
		}
		d = edit(n, d)
		if n != signatureFile {
			h := sha256.Sum256(d)
			sums[n] = hex.EncodeToString(h[:])
		}
		return d
	})
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestBundleSignature(t *testing.T) {
	f := newFixture(t, 8<<10, 2<<10)
	priv, pub := keyPair(t)
	_, otherPub := keyPair(t)
	pk, _ := signing.ParsePublicKey(pub)
	other, _ := signing.ParsePublicKey(otherPub)
	mine := signing.Key{Name: "vendor", Origin: "test", Public: pk}
	theirs := signing.Key{Name: "someone else", Origin: "test", Public: other}
	ctx := context.Background()

	signed := createBundle(t, f, priv)
	// Trusted when any key of the keyring made it.
	r, err := Verify(ctx, signed, OpenOptions{Trust: Trust{Keys: signing.Keyring{theirs, mine}}})
	if err != nil || !r.SignatureVerified || r.KeyID != signing.KeyID(pk) || !strings.Contains(r.TrustedBy, "vendor") || r.Unverified != "" {
		t.Fatalf("trusted key: %+v %v", r, err)
	}
	// Signed by a key that is not trusted: refused, naming both.
	_, err = Verify(ctx, signed, OpenOptions{Trust: Trust{Keys: signing.Keyring{theirs}}})
	var ue *UntrustedKeyError
	if !errors.As(err, &ue) || ue.KeyID != signing.KeyID(pk) || !strings.Contains(err.Error(), signing.KeyID(other)) ||
		!strings.Contains(err.Error(), "--public-key") || !strings.Contains(err.Error(), "--allow-unsigned") {
		t.Errorf("untrusted key: %v", err)
	}
	// No trusted key at all (the zero value): refused.
	if _, err := Verify(ctx, signed, OpenOptions{}); !errors.As(err, &ue) {
		t.Errorf("empty keyring: %v", err)
	}
	// Allowed: accepted, and the provenance says why.
	r, err = Verify(ctx, signed, OpenOptions{Trust: Trust{Keys: signing.Keyring{theirs}, AllowUnsigned: true}})
	if err != nil || r.SignatureVerified || !strings.Contains(r.Unverified, "not trusted") {
		t.Errorf("untrusted key allowed: %+v %v", r, err)
	}

	unsigned := createBundle(t, f, nil)
	_, err = Verify(ctx, unsigned, OpenOptions{Trust: Trust{Keys: signing.Keyring{mine}}})
	if !errors.Is(err, ErrUnsigned) || !strings.Contains(err.Error(), "--allow-unsigned") {
		t.Errorf("unsigned: %v", err)
	}
	r, err = Verify(ctx, unsigned, OpenOptions{Trust: Trust{AllowUnsigned: true}})
	if err != nil || r.Signed || r.Unverified != "not signed" {
		t.Errorf("unsigned allowed: %+v %v", r, err)
	}
	// Opening only the index (inspect) does not judge the signature;
	// deferring it leaves it to CheckTrust.
	b, err := Open(ctx, unsigned, OpenOptions{SkipVerify: true})
	if err != nil {
		t.Fatalf("index only: %v", err)
	}
	b.Close()
	b, err = Open(ctx, unsigned, OpenOptions{DeferTrust: true})
	if err != nil || b.Provenance() != nil {
		t.Fatalf("deferred: %v", err)
	}
	if _, err := b.CheckTrust(Trust{Keys: signing.Keyring{mine}}); !errors.Is(err, ErrUnsigned) {
		t.Errorf("deferred check: %v", err)
	}
	b.Close()

	// Someone changes a chart and fixes up the checksums: only the
	// signature catches it, and allowing unsigned bundles does not let it
	// through (the bundle names a trusted key whose signature fails).
	retarResummed(t, signed, func(n string, d []byte) []byte {
		if n == "charts/redis/values.yaml" {
			d = append(d, []byte("\n# tampered\n")...)
		}
		return d
	})
	var se *SignatureError
	for _, allow := range []bool{false, true} {
		_, err := Verify(ctx, signed, OpenOptions{Trust: Trust{Keys: signing.Keyring{mine}, AllowUnsigned: allow}})
		if !errors.As(err, &se) || se.BundleKeyID != signing.KeyID(pk) || !strings.Contains(err.Error(), "changed after it was signed") {
			t.Errorf("re-summed bundle (allow unsigned %v): %v, want SignatureError", allow, err)
		}
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
	sk, err := signing.LoadPrivateKey(res.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := signing.LoadPublicKey(res.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if signing.KeyID(pk) != res.KeyID || !sk.Public().(ed25519.PublicKey).Equal(pk) {
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
	if _, err := signing.ParsePublicKey([]byte("bm90IGEga2V5")); err == nil {
		t.Error("short public key accepted")
	}
	if _, err := signing.ParsePrivateKey(before[:40]); err == nil {
		t.Error("broken private key accepted")
	}
	if _, err := signing.ParsePublicKey(before); err == nil {
		t.Error("private key accepted as public")
	}
	seed := sk.Seed()
	if k, err := signing.ParsePrivateKey([]byte(b64(seed))); err != nil || !k.Equal(sk) {
		t.Errorf("seed: %v", err)
	}
	if k, err := signing.ParsePublicKey([]byte(b64(pk.(ed25519.PublicKey)))); err != nil || !pk.(ed25519.PublicKey).Equal(k) {
		t.Errorf("raw public: %v", err)
	}
}
