//go:build linux

package testservers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIOVersion is the MinIO server the S3 tests run: the module version of
// github.com/minio/minio (the project publishes source only, so a
// pseudo-version of its main branch; the module proxy serves it).
const MinIOVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"

const minioModule = "github.com/minio/minio"

// S3Server is a running MinIO server with one bucket.
type S3Server struct {
	// Endpoint is http://IP:PORT, or https://IP:PORT with TLS.
	Endpoint string
	// Bucket exists, empty, when StartS3 returns.
	Bucket string
	// AccessKey and SecretKey are the root user's.
	AccessKey, SecretKey string
	// CAFile is the PEM file of the CA that signed the server's
	// certificate (TLS only).
	CAFile string
	// Dir holds the server's data, certificates and log.
	Dir string
	p   *process
}

// S3Options tune StartS3.
type S3Options struct {
	// IP to listen on (default 127.0.0.1): a docker network's gateway
	// lets kind's pods reach it.
	IP string
	// TLS serves HTTPS with a certificate from a CA of its own (CAFile).
	TLS bool
	// Bucket is the bucket to create (default "onprem-backups").
	Bucket string
}

// StartS3 starts MinIO (MinIOVersion), an S3-compatible server that
// operators run on their own hardware, on a free port, storing objects in
// a temporary folder (one drive), and creates a bucket. It stops it in
// t.Cleanup.
//
// The binary is built from the Go module proxy the first time (about 4
// minutes on 2 cores) into $ONPREM_CACHE/bin/minio-<version>.
func StartS3(t testing.TB, o S3Options) *S3Server {
	t.Helper()
	if o.IP == "" {
		o.IP = "127.0.0.1"
	}
	if o.Bucket == "" {
		o.Bucket = "onprem-backups"
	}
	bin, err := MinIOBinary(context.Background(), t.Logf)
	if err != nil {
		t.Fatalf("testservers: %v", err)
	}
	dir := tempDir(t, "onprem-minio-")
	data, certs := filepath.Join(dir, "data"), filepath.Join(dir, "certs")
	for _, d := range []string{data, certs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := &S3Server{Bucket: o.Bucket, AccessKey: "onprem-test", SecretKey: randomHex(t, 16), Dir: dir}
	addr := net.JoinHostPort(o.IP, strconv.Itoa(FreePort(t)))
	scheme := "http"
	if o.TLS {
		scheme = "https"
		s.CAFile = filepath.Join(dir, "ca.crt")
		if err := writeServerCerts(o.IP, s.CAFile, filepath.Join(certs, "public.crt"), filepath.Join(certs, "private.key")); err != nil {
			t.Fatalf("testservers: minio certificates: %v", err)
		}
	}
	s.Endpoint = scheme + "://" + addr
	cmd := exec.Command(bin, "server", data, "--address", addr, "--console-address", net.JoinHostPort(o.IP, strconv.Itoa(FreePort(t))), "--certs-dir", certs, "--quiet")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CALLHOME_ENABLE=off", "HOME="+dir)
	t0 := time.Now()
	s.p = start(t, "minio", filepath.Join(dir, "minio.log"), cmd)
	client := s.Client(t)
	waitReady(t, s.p, time.Minute, func(ctx context.Context) error {
		return client.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{})
	})
	t.Logf("testservers: MinIO at %s, bucket %s (started in %s)", s.Endpoint, s.Bucket, time.Since(t0).Round(10*time.Millisecond))
	return s
}

// Client returns a client of the server as its root user.
func (s *S3Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	host := strings.TrimPrefix(strings.TrimPrefix(s.Endpoint, "https://"), "http://")
	c, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Secure: s.CAFile != "", Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Stop stops the server (also done in t.Cleanup).
func (s *S3Server) Stop() { s.p.stop() }

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// writeServerCerts makes a CA and a serving certificate for ip and
// 127.0.0.1.
func writeServerCerts(ip, caFile, certFile, keyFile string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "onprem test S3 CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	if p := net.ParseIP(ip); p != nil && !p.Equal(ips[0]) {
		ips = append(ips, p)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "minio"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: ips, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{{caFile, "CERTIFICATE", caDER, 0o644}, {certFile, "CERTIFICATE", der, 0o644}, {keyFile, "PRIVATE KEY", keyDER, 0o600}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), f.mode); err != nil {
			return err
		}
	}
	return nil
}

var minioServer = &cachedBinary{what: "MinIO", file: "minio-" + MinIOVersion, src: "minio", version: MinIOVersion, build: buildMinIO}

// MinIOBinary returns the path of the MinIO server binary,
// $ONPREM_CACHE/bin/minio-<MinIOVersion>, building it from the module
// proxy first when it is missing.
func MinIOBinary(ctx context.Context, log func(string, ...any)) (string, error) {
	return minioServer.get(ctx, log)
}

// buildMinIO runs `go install` of the pinned module version into a
// temporary folder of src and moves the binary to tmp.
func buildMinIO(ctx context.Context, src, tmp string) error {
	logPath := filepath.Join(src, "build.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	gobin := filepath.Join(src, fmt.Sprintf("gobin-%d", os.Getpid()))
	defer os.RemoveAll(gobin)
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", "-ldflags", "-s -w", minioModule+"@"+MinIOVersion)
	cmd.Dir = src
	// Outside any module, with -mod=mod dropped from GOFLAGS: go install
	// pkg@version resolves the module's own requirements.
	var flags []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if !strings.HasPrefix(f, "-mod=") {
			flags = append(flags, f)
		}
	}
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOTOOLCHAIN=local", "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS="+strings.Join(flags, " "))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = logf, logf
	fmt.Fprintf(logf, "$ go install %s@%s\n", minioModule, MinIOVersion)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go install %s@%s: %w\n%s", minioModule, MinIOVersion, err, tail(logPath, 30))
	}
	data, err := os.ReadFile(filepath.Join(gobin, "minio"))
	if err != nil {
		return err
	}
	return os.WriteFile(tmp, data, 0o755)
}
