package config

import (
	"regexp"
	"strings"

	"filippo.io/age"
)

// cronMacros are the schedules Kubernetes accepts besides five fields.
var cronMacros = []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}

// cronField is one field of a five-field schedule: numbers, names (JAN,
// MON), *, ranges, lists and steps.
var cronField = regexp.MustCompile(`^(\*|\?|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?(,(\*|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?)*$`)

// timeZone is an IANA zone name (Europe/Berlin, UTC, America/Argentina/Salta).
var timeZone = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`)

func (v *validator) backup(s *Spec) {
	b := s.Backup
	const p = "spec.backup"
	if b.Schedule != "" {
		v.check(p+".schedule", checkSchedule(b.Schedule), `e.g. "0 2 * * *" (every day at 02:00) or @daily`)
		if b.S3.Bucket == "" {
			v.required(p+".s3.bucket", "a scheduled backup is written to a bucket: set spec.backup.s3 (endpoint, bucket, credentialsSecret)")
		}
		if len(b.Recipients) == 0 {
			v.required(p+".recipients", "the public keys backups are encrypted to (from 'onprem backup keygen')")
		}
	}
	if b.TimeZone != "" {
		if !timeZone.MatchString(b.TimeZone) {
			v.c.add(p+".timeZone", "e.g. Europe/Berlin or UTC", "%q is not an IANA time zone name", b.TimeZone)
		}
		if b.Schedule == "" {
			v.c.add(p+".timeZone", "set spec.backup.schedule, or remove timeZone", "a time zone without a schedule does nothing")
		}
	}
	if b.Keep < 0 {
		v.c.add(p+".keep", "0 keeps every backup", "%d: how many backups to keep cannot be negative", b.Keep)
	}
	if b.S3 != (BackupS3{}) {
		if b.S3.Endpoint == "" {
			v.required(p+".s3.endpoint", "the S3-compatible server's URL, e.g. https://minio.example.com:9000")
		} else {
			msg, hint := checkHTTPURL(b.S3.Endpoint, "https", "https://minio.example.com:9000")
			if msg == "" && strings.Count(b.S3.Endpoint, "/") > 2 && !strings.HasSuffix(b.S3.Endpoint, "/") {
				msg, hint = sprintf("%q has a path: give the server's URL only", b.S3.Endpoint), "put the folder in spec.backup.s3.prefix"
			}
			v.check(p+".s3.endpoint", msg, hint)
		}
		if b.S3.Bucket == "" {
			v.required(p+".s3.bucket", "the bucket's name")
		} else {
			v.check(p+".s3.bucket", checkBucket(b.S3.Bucket), "")
		}
		if b.S3.CredentialsSecret == "" {
			v.required(p+".s3.credentialsSecret", "a Secret of the platform namespace with the keys accessKeyID and secretAccessKey")
		} else {
			v.check(p+".s3.credentialsSecret", checkDNSSubdomain(b.S3.CredentialsSecret), "")
		}
		if b.S3.CASecret != "" {
			v.check(p+".s3.caSecret", checkDNSSubdomain(b.S3.CASecret), "")
		}
		if strings.HasPrefix(b.S3.Prefix, "/") || strings.Contains(b.S3.Prefix, "..") {
			v.c.add(p+".s3.prefix", "e.g. onprem/prod", "%q: a folder of the bucket, relative, without ..", b.S3.Prefix)
		}
	}
	pq, classic := 0, 0
	for i, r := range b.Recipients {
		path := indexPath(p+".recipients", i)
		if strings.HasPrefix(r, "AGE-SECRET-KEY") {
			v.c.add(path, "give the public key (backup.pub), and keep the private key off the cluster", "this is a private key")
			continue
		}
		rs, err := age.ParseRecipients(strings.NewReader(r))
		if err != nil || len(rs) != 1 {
			v.c.add(path, "the content of backup.pub from 'onprem backup keygen'", "%q is not an age public key", abbreviateKey(r))
			continue
		}
		if _, ok := rs[0].(*age.HybridRecipient); ok {
			pq++
		} else {
			classic++
		}
	}
	if pq > 0 && classic > 0 {
		v.c.add(p+".recipients", "use keys of one kind", "post-quantum keys (age1pq1...) and classic ones (age1...) cannot be mixed: the classic ones would make the backups readable by a quantum computer")
	}
}

// checkSchedule checks a CronJob schedule.
func checkSchedule(s string) string {
	if strings.HasPrefix(s, "@") {
		for _, m := range cronMacros {
			if s == m {
				return ""
			}
		}
		return sprintf("%q is not a schedule (valid macros: %s)", s, strings.Join(cronMacros, ", "))
	}
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return sprintf("%q has %d fields, a schedule has 5: minute hour day-of-month month day-of-week", s, len(fields))
	}
	for i, f := range fields {
		if !cronField.MatchString(f) {
			return sprintf("%q: field %d (%s) is not valid", s, i+1, []string{"minute", "hour", "day of month", "month", "day of week"}[i])
		}
	}
	return ""
}

// checkBucket checks an S3 bucket name (3-63 lower-case letters, digits,
// dots and hyphens).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

func checkBucket(b string) string {
	if !bucketName.MatchString(b) {
		return sprintf("%q is not a bucket name (3 to 63 lower-case letters, digits, dots and hyphens)", b)
	}
	return ""
}

func abbreviateKey(s string) string {
	if len(s) > 16 {
		return s[:12] + "..."
	}
	return s
}
