package backupstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3PartSize is the part size of the multipart uploads; with S3's limit of
// 10,000 parts it bounds a backup at about 312 GiB, and each upload holds
// one part in memory.
const S3PartSize = 32 << 20

// Environment variables S3 reads credentials from when none are given
// (the AWS tools' names).
const (
	EnvAccessKey = "AWS_ACCESS_KEY_ID"
	EnvSecretKey = "AWS_SECRET_ACCESS_KEY"
)

// S3Options say how to reach a bucket.
type S3Options struct {
	// Endpoint is the server's URL (https://s3.example.com:9000; http://
	// only for a lab server). Required: onprem never talks to a public
	// cloud by default.
	Endpoint string
	Region   string
	// AccessKey and SecretKey; when both are empty they are read from
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
	AccessKey, SecretKey string
	// CAFile is a PEM bundle trusted for the endpoint's certificate, in
	// addition to the system's.
	CAFile string
	// CAPEM is the same as CAFile, given as content (from a Secret).
	CAPEM []byte
}

// S3 keeps backups in a bucket, under a prefix.
type S3 struct {
	Bucket, Prefix string
	endpoint       string
	client         *minio.Client
}

// ParseS3 reads s3://BUCKET[/PREFIX] and returns the bucket and prefix.
func ParseS3(ref string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(ref, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%q is not an s3://BUCKET[/PREFIX] address", ref)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%q names no bucket (s3://BUCKET[/PREFIX])", ref)
	}
	return bucket, strings.Trim(prefix, "/"), nil
}

// NewS3 returns the bucket's store. It connects to nothing yet.
func NewS3(bucket, prefix string, o S3Options) (*S3, error) {
	if o.Endpoint == "" {
		return nil, errors.New("an S3 destination needs its endpoint (--s3-endpoint https://HOST[:PORT], or spec.backup.s3.endpoint)")
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("S3 endpoint %q: want https://HOST[:PORT] (http:// only for a lab server), without a path", o.Endpoint)
	}
	ak, sk := o.AccessKey, o.SecretKey
	if ak == "" && sk == "" {
		ak, sk = os.Getenv(EnvAccessKey), os.Getenv(EnvSecretKey)
	}
	if ak == "" || sk == "" {
		return nil, fmt.Errorf("no credentials for the S3 endpoint %s: set %s and %s, or name a Secret with keys accessKeyID and secretAccessKey (--s3-credentials-secret, spec.backup.s3.credentialsSecret)",
			o.Endpoint, EnvAccessKey, EnvSecretKey)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if o.CAFile != "" || len(o.CAPEM) > 0 {
		pem := o.CAPEM
		if o.CAFile != "" {
			if pem, err = os.ReadFile(o.CAFile); err != nil {
				return nil, fmt.Errorf("S3 CA file: %w", err)
			}
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("S3 CA %s: no PEM certificate in it", o.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:     credentials.NewStaticV4(ak, sk, ""),
		Secure:    u.Scheme == "https",
		Region:    o.Region,
		Transport: tr,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %s: %w", o.Endpoint, err)
	}
	return &S3{Bucket: bucket, Prefix: strings.Trim(prefix, "/"), endpoint: o.Endpoint, client: c}, nil
}

func (s *S3) String() string {
	where := "s3://" + s.Bucket
	if s.Prefix != "" {
		where += "/" + s.Prefix
	}
	return where + " at " + s.endpoint
}

func (s *S3) key(name string) string {
	if s.Prefix == "" {
		return name
	}
	return s.Prefix + "/" + name
}

// Create streams the backup as a multipart upload: S3 shows the object only
// when the upload completes, on Commit; Abort (or an error) aborts the
// upload and nothing of it stays visible.
func (s *S3) Create(ctx context.Context, name string) (Upload, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if _, err := s.client.StatObject(ctx, s.Bucket, s.key(name), minio.StatObjectOptions{}); err == nil {
		return nil, &ExistsError{Name: name, Where: s.String()}
	} else if code := minio.ToErrorResponse(err).Code; code != "NoSuchKey" && code != "NotFound" {
		return nil, s.explain("checking", err)
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	u := &s3Upload{s: s, pw: pw, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(u.done)
		_, err := s.client.PutObject(ctx, s.Bucket, s.key(name), pr, -1, minio.PutObjectOptions{
			PartSize: S3PartSize, ContentType: "application/octet-stream",
		})
		if err != nil {
			u.err = s.explain("writing", err)
		}
		pr.CloseWithError(err)
	}()
	return u, nil
}

type s3Upload struct {
	s      *S3
	pw     *io.PipeWriter
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	once   sync.Once
	closed bool
}

var errAborted = errors.New("backup aborted")

func (u *s3Upload) Write(p []byte) (int, error) {
	n, err := u.pw.Write(p)
	if err != nil {
		<-u.done
		if u.err != nil {
			return n, u.err
		}
	}
	return n, err
}

func (u *s3Upload) Commit() error {
	if u.closed {
		return errors.New("backup: already committed or aborted")
	}
	u.closed = true
	u.pw.Close()
	<-u.done
	u.cancel()
	return u.err
}

func (u *s3Upload) Abort() {
	u.once.Do(func() {
		if u.closed {
			return
		}
		u.closed = true
		u.pw.CloseWithError(errAborted)
		<-u.done
		u.cancel()
	})
}

func (s *S3) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	if err := checkName(name); err != nil {
		return nil, 0, err
	}
	st, err := s.client.StatObject(ctx, s.Bucket, s.key(name), minio.StatObjectOptions{})
	if err != nil {
		if code := minio.ToErrorResponse(err).Code; code == "NoSuchKey" || code == "NotFound" {
			objs, _ := s.List(ctx)
			return nil, 0, &NotFoundError{Name: name, Where: s.String(), Available: names(objs)}
		}
		return nil, 0, s.explain("reading", err)
	}
	obj, err := s.client.GetObject(ctx, s.Bucket, s.key(name), minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, s.explain("reading", err)
	}
	return obj, st.Size, nil
}

func (s *S3) List(ctx context.Context) ([]Object, error) {
	prefix := ""
	if s.Prefix != "" {
		prefix = s.Prefix + "/"
	}
	var out []Object
	for o := range s.client.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if o.Err != nil {
			return nil, s.explain("listing", o.Err)
		}
		name := path.Base(o.Key)
		if strings.TrimSuffix(o.Key, name) != prefix || checkName(name) != nil {
			continue
		}
		out = append(out, Object{Name: name, Size: o.Size, Modified: o.LastModified.UTC()})
	}
	sortObjects(out)
	return out, nil
}

func (s *S3) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.Bucket, s.key(name), minio.RemoveObjectOptions{}); err != nil {
		if code := minio.ToErrorResponse(err).Code; code == "NoSuchKey" || code == "NotFound" {
			return nil
		}
		return s.explain("deleting "+name+" from", err)
	}
	return nil
}

// S3Error is a failure of the bucket, with what an operator should check.
type S3Error struct {
	Where, Doing, Code, Hint string
	Err                      error
}

func (e *S3Error) Error() string {
	msg := fmt.Sprintf("%s the backup destination %s: %v", e.Doing, e.Where, e.Err)
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}

func (e *S3Error) Unwrap() error { return e.Err }

// explain adds to an S3 error what the operator should check.
func (s *S3) explain(doing string, err error) error {
	if errors.Is(err, errAborted) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	hint := ""
	switch resp.Code {
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
		hint = "the bucket refused the credentials: check the access key and secret (and that they may read and write the bucket)"
	case "NoSuchBucket":
		hint = "the bucket does not exist: create it first (onprem never creates buckets)"
	case "XMinioStorageFull", "StorageFull", "EntityTooLarge", "QuotaExceeded", "XMinioAdminBucketQuotaExceeded":
		hint = "the destination is full: free space there or choose another destination; nothing was kept of this backup"
	}
	if hint == "" {
		var ue *url.Error
		if errors.As(err, &ue) {
			hint = "the endpoint cannot be reached (or its certificate is not trusted: --s3-ca-file)"
		}
	}
	return &S3Error{Where: s.String(), Doing: doing, Code: resp.Code, Hint: hint, Err: err}
}
