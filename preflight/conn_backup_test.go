//go:build linux

package preflight

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"onprem.dev/onprem/e2e/testservers"
)

func backupYAML(endpoint, bucket string) string {
	return fmt.Sprintf(`apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: 2.8.0
  domain: ci.example.com
  backup:
    schedule: "@daily"
    s3:
      endpoint: %s
      bucket: %s
      prefix: onprem
      credentialsSecret: s3-credentials
      caSecret: s3-ca
    recipients: [age1wvt9qswx46jnegg8qfra5evxl450ur5ul2jx2gpgtay0248ykg9qsasy7p]
`, endpoint, bucket)
}

// The backup check against a real MinIO: the Secrets must be there with
// their keys, the bucket must accept the credentials, and a bucket this
// machine cannot reach only warns.
func TestBackupDestinationCheck(t *testing.T) {
	t.Parallel()
	s3 := testservers.StartS3(t, testservers.S3Options{TLS: true})
	ca, err := os.ReadFile(s3.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	env := connTestEnv(t, backupYAML(s3.Endpoint, s3.Bucket))
	check := backupCheck()

	connExpect(t, connRunCheck(t, env, check), Fail, "s3-credentials", "does not exist", "|", "kubectl -n onprem create secret generic s3-credentials")
	connPutSecret(t, env, "s3-credentials", corev1.SecretTypeOpaque, map[string]string{"accessKeyID": s3.AccessKey})
	connExpect(t, connRunCheck(t, env, check), Fail, "lacks the key")
	connPutSecret(t, env, "s3-credentials", corev1.SecretTypeOpaque, map[string]string{"accessKeyID": s3.AccessKey, "secretAccessKey": s3.SecretKey})
	connExpect(t, connRunCheck(t, env, check), Fail, "s3-ca", "does not exist")
	connPutSecret(t, env, "s3-ca", corev1.SecretTypeOpaque, map[string]string{"ca.crt": string(ca)})
	connExpect(t, connRunCheck(t, env, check), Pass, "answers", "s3-credentials")

	connPutSecret(t, env, "s3-credentials", corev1.SecretTypeOpaque, map[string]string{"accessKeyID": s3.AccessKey, "secretAccessKey": "not-the-secret"})
	connExpect(t, connRunCheck(t, env, check), Fail, "refused the credentials")

	// Another bucket, and nothing listening: the first fails, the second
	// warns.
	connPutSecret(t, env, "s3-credentials", corev1.SecretTypeOpaque, map[string]string{"accessKeyID": s3.AccessKey, "secretAccessKey": s3.SecretKey})
	env.Installation.Spec.Backup.S3.Bucket = "missing-bucket"
	connExpect(t, connRunCheck(t, env, check), Fail, "does not exist")
	env.Installation.Spec.Backup.S3.Bucket = s3.Bucket
	env.Installation.Spec.Backup.S3.Endpoint = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(testservers.FreePort(t)))
	connExpect(t, connRunCheck(t, env, check), Warn, "cannot reach", "|", "create job --from=cronjob/onprem-backup")

	env.Installation.Spec.Backup.S3.Bucket = ""
	connExpect(t, connRunCheck(t, env, check), Pass, "no backup bucket")
}
