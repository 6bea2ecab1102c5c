package preflight

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"onprem.dev/onprem/installer/backupstore"
)

// backupTimeout bounds the check's talk with the bucket.
const backupTimeout = 15 * time.Second

// backupCheck checks spec.backup's bucket: its credentials and CA Secrets
// exist with their keys, and the bucket answers a listing with them. A
// bucket this machine cannot reach only warns: the scheduled backups run
// in the cluster, which may reach what the operator's machine cannot.
func backupCheck() Check {
	return Check{
		ID:       "backup-destination",
		Title:    "The backups' bucket (spec.backup.s3) exists and accepts its credentials",
		Severity: Blocking,
		Run:      runBackupCheck,
	}
}

func runBackupCheck(ctx context.Context, env *Env) Outcome {
	if env == nil || env.Installation == nil {
		return connFail("the check could not run: no configuration was loaded", "run preflight with a valid onprem.yaml (-c onprem.yaml)")
	}
	in := env.Installation
	b := in.Spec.Backup
	if b.S3.Bucket == "" {
		return Passed("no backup bucket configured (spec.backup.s3): backups go where 'onprem backup create --to' says")
	}
	if env.Cluster == nil {
		return connFail("the check could not run: no cluster to read the credentials Secret from", "give --kubeconfig/--context")
	}
	ns := in.Spec.Namespace
	create := fmt.Sprintf("kubectl -n %s create secret generic %s --from-literal=accessKeyID=KEY --from-literal=secretAccessKey=SECRET", ns, b.S3.CredentialsSecret)
	sec, err := env.Secret(ctx, ns, b.S3.CredentialsSecret)
	switch {
	case apierrors.IsNotFound(err):
		return connFail(fmt.Sprintf("spec.backup.s3.credentialsSecret: Secret %s/%s does not exist", ns, b.S3.CredentialsSecret), "create it: "+create)
	case err != nil:
		return connFail(fmt.Sprintf("reading Secret %s/%s (spec.backup.s3.credentialsSecret): %v", ns, b.S3.CredentialsSecret, err), "check that you may read Secrets in namespace "+ns)
	}
	o := backupstore.S3Options{Endpoint: b.S3.Endpoint, Region: b.S3.Region,
		AccessKey: string(sec.Data["accessKeyID"]), SecretKey: string(sec.Data["secretAccessKey"])}
	if o.AccessKey == "" || o.SecretKey == "" {
		return connFail(fmt.Sprintf("Secret %s/%s (spec.backup.s3.credentialsSecret) lacks the key accessKeyID or secretAccessKey", ns, b.S3.CredentialsSecret), "make it again: "+create)
	}
	if b.S3.CASecret != "" {
		ca, err := env.Secret(ctx, ns, b.S3.CASecret)
		switch {
		case apierrors.IsNotFound(err):
			return connFail(fmt.Sprintf("spec.backup.s3.caSecret: Secret %s/%s does not exist", ns, b.S3.CASecret),
				fmt.Sprintf("create it: kubectl -n %s create secret generic %s --from-file=ca.crt=CA.pem", ns, b.S3.CASecret))
		case err != nil:
			return connFail(fmt.Sprintf("reading Secret %s/%s (spec.backup.s3.caSecret): %v", ns, b.S3.CASecret, err), "check that you may read Secrets in namespace "+ns)
		case len(ca.Data["ca.crt"]) == 0:
			return connFail(fmt.Sprintf("Secret %s/%s (spec.backup.s3.caSecret) has no ca.crt", ns, b.S3.CASecret),
				fmt.Sprintf("make it again: kubectl -n %s create secret generic %s --from-file=ca.crt=CA.pem", ns, b.S3.CASecret))
		}
		o.CAPEM = ca.Data["ca.crt"]
	}
	store, err := backupstore.NewS3(b.S3.Bucket, b.S3.Prefix, o)
	if err != nil {
		return connFail(err.Error(), "check spec.backup.s3")
	}
	lctx, cancel := context.WithTimeout(ctx, backupTimeout)
	defer cancel()
	objs, err := store.List(lctx)
	if err != nil {
		var se *backupstore.S3Error
		var ue *url.Error
		if errors.As(err, &se) && se.Code == "" && (errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded)) {
			return Outcome{Result: Warn, Message: fmt.Sprintf("this machine cannot reach the bucket: %v", err),
				Remediation: "the scheduled backups run in the cluster and may reach it from there: after the install, run one now with 'kubectl -n " + ns + " create job --from=cronjob/onprem-backup onprem-backup-now' and look at 'onprem status'"}
		}
		return connFail(err.Error(), "check spec.backup.s3 (endpoint, bucket, prefix) and the credentials in Secret "+ns+"/"+b.S3.CredentialsSecret)
	}
	return Passed("bucket %s answers with the credentials of Secret %s (%d backups there)", store, b.S3.CredentialsSecret, len(backupstore.Of(in.Metadata.Name, objs)))
}
