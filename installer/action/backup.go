package action

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/backupstore"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/version"
)

// Keys of the Secret that holds a bucket's credentials
// (BackupDestination.S3CredentialsSecret, spec.backup.s3.credentialsSecret).
const (
	S3AccessKeyKey = "accessKeyID"
	S3SecretKeyKey = "secretAccessKey"
)

// BackupDestination says where backups are kept: a folder on this machine
// or an S3-compatible bucket.
type BackupDestination struct {
	// To is a folder (created if missing) or s3://BUCKET[/PREFIX].
	To string
	// S3 says how to reach the bucket (endpoint, region, CA, credentials).
	S3 backupstore.S3Options
	// S3CredentialsSecret names a Secret of the platform namespace with the
	// keys accessKeyID and secretAccessKey (default: the explicit keys,
	// else AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).
	S3CredentialsSecret string
}

// IsS3 reports whether the destination is a bucket.
func (d BackupDestination) IsS3() bool { return strings.HasPrefix(d.To, "s3://") }

// open returns the destination's store; cl and ns are needed only for a
// credentials Secret.
func (d BackupDestination) open(ctx context.Context, cl *kube.Cluster, ns string) (backupstore.Store, error) {
	if d.To == "" {
		return nil, inputErr(errors.New("no backup destination: give --to FOLDER or --to s3://BUCKET[/PREFIX] (with --s3-endpoint)"))
	}
	if !d.IsS3() {
		if strings.Contains(d.To, "://") {
			return nil, inputErr(fmt.Errorf("backup destination %q: give a folder or s3://BUCKET[/PREFIX]", d.To))
		}
		return backupstore.Dir{Path: d.To}, nil
	}
	bucket, prefix, err := backupstore.ParseS3(d.To)
	if err != nil {
		return nil, inputErr(err)
	}
	o := d.S3
	if d.S3CredentialsSecret != "" {
		if cl == nil {
			return nil, inputErr(fmt.Errorf("the S3 credentials Secret %s is read from the platform's cluster: give --context/--kubeconfig", d.S3CredentialsSecret))
		}
		sec, err := cl.Client.CoreV1().Secrets(ns).Get(ctx, d.S3CredentialsSecret, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading the S3 credentials (Secret %s/%s): %w", ns, d.S3CredentialsSecret, err)
		}
		o.AccessKey, o.SecretKey = string(sec.Data[S3AccessKeyKey]), string(sec.Data[S3SecretKeyKey])
		if o.AccessKey == "" || o.SecretKey == "" {
			return nil, inputErr(fmt.Errorf("Secret %s/%s must have the keys %s and %s", ns, d.S3CredentialsSecret, S3AccessKeyKey, S3SecretKeyKey))
		}
	}
	s, err := backupstore.NewS3(bucket, prefix, o)
	if err != nil {
		return nil, inputErr(err)
	}
	return s, nil
}

// ref resolves a backup named by a path or an s3:// address of the file,
// or by its name at the destination.
func (d BackupDestination) ref(ctx context.Context, cl *kube.Cluster, ns, name string) (backupstore.Store, string, error) {
	switch {
	case strings.HasPrefix(name, "s3://"):
		i := strings.LastIndex(name, "/")
		d.To, name = name[:i], name[i+1:]
		if d.To == "s3:/" {
			return nil, "", inputErr(fmt.Errorf("%q: give s3://BUCKET[/PREFIX]/NAME%s", name, backupfile.Extension))
		}
	case strings.ContainsRune(name, os.PathSeparator) || (d.To == "" && name != ""):
		d.To, name = filepath.Dir(name), filepath.Base(name)
	}
	s, err := d.open(ctx, cl, ns)
	if err != nil {
		return nil, "", err
	}
	return s, name, nil
}

// BackupKeygen writes a new key pair for backups.
type BackupKeygen struct {
	// Out is the folder of the key files (made if missing).
	Out string
}

// Run writes the keys.
func (k *BackupKeygen) Run(context.Context) (*backupfile.KeygenResult, error) {
	if k.Out == "" {
		k.Out = "."
	}
	res, err := backupfile.Keygen(k.Out)
	if err != nil {
		return nil, inputErr(err)
	}
	return res, nil
}

// BackupCreate backs up the platform: every MongoDB and PostgreSQL database
// of its services (their engines' own dump tools, run in their pods,
// streamed through the API server), RabbitMQ's definitions (not the
// messages in flight), Redis optionally, the generated Secrets, the state,
// the configuration and the registrations, encrypted, to the destination.
type BackupCreate struct {
	Target
	Destination BackupDestination
	// Keys are what the backup is encrypted to (recipients or a
	// passphrase).
	Keys backupfile.Keys
	// IncludeRedis adds Redis's data (a cache: off by default).
	IncludeRedis bool
	// Keep, when positive, deletes the oldest backups of the installation
	// at the destination so that Keep remain.
	Keep int
	// Trigger says what started it (default manual).
	Trigger   string
	LockWait  time.Duration
	LockLease time.Duration
	Progress  func(backup.Progress)
	// Exec runs the dump tools (default: in the pods, through the API
	// server).
	Exec podexec.Executor
}

// BackupCreateResult is what a backup wrote.
type BackupCreateResult struct {
	backup.Result
	// Pruned are the backups deleted to keep Keep.
	Pruned []string `json:"pruned,omitempty"`
}

// Run backs up.
func (b *BackupCreate) Run(ctx context.Context) (*BackupCreateResult, error) {
	recipients, err := b.Keys.EncryptTo()
	if err != nil {
		return nil, inputErr(err)
	}
	if b.Keep < 0 {
		return nil, inputErr(fmt.Errorf("--keep %d: give how many backups to keep (0: all)", b.Keep))
	}
	var cfg map[string][]byte
	if b.ConfigPath != "" {
		if _, err := os.Stat(b.ConfigPath); err == nil {
			l, err := (Source{ConfigPath: b.ConfigPath}).Load(ctx)
			if err != nil {
				return nil, err
			}
			l.Close()
			if cfg, err = backup.PackConfig(l.Installation); err != nil {
				return nil, inputErr(err)
			}
		}
	}
	// A bad destination is refused before the cluster is reached (unless
	// its credentials are read there).
	var store backupstore.Store
	if b.Destination.S3CredentialsSecret == "" {
		if store, err = b.Destination.open(ctx, nil, ""); err != nil {
			return nil, err
		}
	}
	ns, conf, cl, err := targetCluster(ctx, b.Target, b.Conn, b.Cluster)
	if err != nil {
		return nil, err
	}
	if store == nil {
		if store, err = b.Destination.open(ctx, cl, ns); err != nil {
			return nil, err
		}
	}
	ctx, h, err := conf.lockInstalled(ctx, ns, "backup", b.LockWait, b.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	if err := databasesSettled(ctx, cl.Client, ns, h.st); err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cl.Config)
	if err != nil {
		return nil, err
	}
	trigger := b.Trigger
	if trigger == "" {
		trigger = backupfile.TriggerManual
	}
	if err := h.store.Begin(ctx, h.st, state.Operation{Kind: state.KindBackup, Version: h.st.Version, Installer: version.Version,
		Message: "backing up to " + store.String()}); err != nil {
		return nil, err
	}
	ex := b.Exec
	if ex == nil {
		ex = podexec.Kube{Config: cl.Config, Client: cl.Client}
	}
	res, err := backup.Create(ctx, backup.CreateOptions{
		Client: cl.Client, Dynamic: dyn, Exec: ex, Namespace: ns, State: h.st, Config: cfg,
		Recipients: recipients, Store: store, Trigger: trigger, IncludeRedis: b.IncludeRedis, Progress: b.Progress,
	})
	op := h.st.Current()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		op.Backup = &state.BackupRecord{Where: store.String(), Trigger: trigger}
		if ferr := h.store.Finish(context.WithoutCancel(ctx), h.st, state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return nil, err
	}
	op.Backup = &state.BackupRecord{Name: res.Name, Where: res.Where, Trigger: trigger, Size: res.Size, Databases: len(res.Manifest.Databases()), Version: res.Manifest.Version}
	out := &BackupCreateResult{Result: *res}
	msg := fmt.Sprintf("backup %s written to %s (%d bytes, %d databases)", res.Name, res.Where, res.Size, len(res.Manifest.Databases()))
	if b.Keep > 0 {
		pruned, perr := backupstore.Prune(ctx, store, h.st.Installation, b.Keep, res.Name)
		out.Pruned = pruned
		if len(pruned) > 0 {
			msg += fmt.Sprintf("; %d older deleted to keep %d", len(pruned), b.Keep)
		}
		if perr != nil {
			msg += "; deleting older backups failed: " + perr.Error()
		}
	}
	if err := h.store.Finish(ctx, h.st, state.OutcomeSucceeded, msg); err != nil {
		return out, err
	}
	return out, nil
}

// BackupList lists the backups at a destination.
type BackupList struct {
	Target
	Destination BackupDestination
	// Installation, when set, lists only that installation's backups.
	Installation string
}

// BackupListResult lists backups, oldest first.
type BackupListResult struct {
	Where   string               `json:"where"`
	Backups []backupstore.Object `json:"backups"`
}

// Run lists.
func (b *BackupList) Run(ctx context.Context) (*BackupListResult, error) {
	store, err := b.openStore(ctx, b.Target, b.Destination)
	if err != nil {
		return nil, err
	}
	objs, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	if b.Installation != "" {
		objs = backupstore.Of(b.Installation, objs)
	}
	if objs == nil {
		objs = []backupstore.Object{}
	}
	return &BackupListResult{Where: store.String(), Backups: objs}, nil
}

// openStore opens a destination, connecting to the cluster only when a
// credentials Secret must be read there.
func (b *BackupList) openStore(ctx context.Context, t Target, d BackupDestination) (backupstore.Store, error) {
	cl, ns, err := clusterFor(ctx, t, d)
	if err != nil {
		return nil, err
	}
	return d.open(ctx, cl, ns)
}

// clusterFor connects to the platform's cluster when the destination's
// credentials are in a Secret there.
func clusterFor(ctx context.Context, t Target, d BackupDestination) (*kube.Cluster, string, error) {
	if d.S3CredentialsSecret == "" {
		return nil, "", nil
	}
	ns, err := t.namespace(ctx)
	if err != nil {
		return nil, "", err
	}
	cl, err := connect(ctx, t.Conn, t.Cluster)
	if err != nil {
		return nil, "", err
	}
	return cl, ns, nil
}

// BackupInspect reads a whole backup, checks every entry and returns its
// manifest (never a secret value: Secrets are named, not shown).
type BackupInspect struct {
	Target
	Destination BackupDestination
	// Backup is a file, an s3://BUCKET/PREFIX/NAME address, or a name at
	// Destination.
	Backup  string
	Keys    backupfile.Keys
	WorkDir string
}

// BackupInspectResult describes a verified backup.
type BackupInspectResult struct {
	Name     string               `json:"name"`
	Where    string               `json:"where"`
	Verified bool                 `json:"verified"`
	Manifest *backupfile.Manifest `json:"manifest"`
	// Secrets names the Secrets it holds (namespace/name).
	Secrets       []string             `json:"secrets"`
	Registrations backup.Registrations `json:"registrations"`
	Databases     []backupfile.Entry   `json:"databases"`
}

// Run inspects.
func (b *BackupInspect) Run(ctx context.Context) (*BackupInspectResult, error) {
	ids, err := b.Keys.DecryptWith()
	if err != nil {
		return nil, inputErr(err)
	}
	cl, ns, err := clusterFor(ctx, b.Target, b.Destination)
	if err != nil {
		return nil, err
	}
	store, name, err := b.Destination.ref(ctx, cl, ns, b.Backup)
	if err != nil {
		return nil, err
	}
	o, err := openBackup(ctx, store, name, backup.OpenOptions{Identities: ids, WorkDir: b.WorkDir})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	out := &BackupInspectResult{Name: name, Where: store.String(), Verified: true, Manifest: o.Manifest, Registrations: o.Registrations, Databases: o.Manifest.Databases()}
	for _, s := range o.Secrets {
		out.Secrets = append(out.Secrets, s.Namespace+"/"+s.Name)
	}
	return out, nil
}

// BackupDelete deletes a backup.
type BackupDelete struct {
	Target
	Destination BackupDestination
	Backup      string
}

// Run deletes.
func (b *BackupDelete) Run(ctx context.Context) (string, error) {
	cl, ns, err := clusterFor(ctx, b.Target, b.Destination)
	if err != nil {
		return "", err
	}
	store, name, err := b.Destination.ref(ctx, cl, ns, b.Backup)
	if err != nil {
		return "", err
	}
	if _, _, err := store.Open(ctx, name); err != nil {
		var nf *backupstore.NotFoundError
		if errors.As(err, &nf) {
			return "", inputErr(err)
		}
		return "", err
	}
	if err := store.Delete(ctx, name); err != nil {
		return "", err
	}
	return name + " deleted from " + store.String(), nil
}

// configuredStore opens the bucket of a configuration's spec.backup, with
// its credentials and CA Secrets read from namespace ns.
func configuredStore(ctx context.Context, cl *kube.Cluster, ns string, b config.Backup) (backupstore.Store, error) {
	dest := BackupDestination{To: "s3://" + b.S3.Bucket + "/" + b.S3.Prefix, S3CredentialsSecret: b.S3.CredentialsSecret,
		S3: backupstore.S3Options{Endpoint: b.S3.Endpoint, Region: b.S3.Region}}
	if b.S3.CASecret != "" {
		sec, err := cl.Client.CoreV1().Secrets(ns).Get(ctx, b.S3.CASecret, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("spec.backup.s3.caSecret: reading Secret %s/%s: %w", ns, b.S3.CASecret, err)
		}
		dest.S3.CAPEM = sec.Data["ca.crt"]
	}
	store, err := dest.open(ctx, cl, ns)
	if err != nil {
		return nil, fmt.Errorf("spec.backup: %w", err)
	}
	return store, nil
}

// ErrNoBucket: the configuration names no bucket for backups.
var ErrNoBucket = errors.New("the configuration names no bucket for backups (spec.backup.s3.bucket): see 'onprem backup --help'")

// ConfiguredBackups lists the installation's backups in the bucket its
// configuration names (spec.backup.s3), oldest first.
type ConfiguredBackups struct {
	Source
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
}

// Run lists; ErrNoBucket (an input error) when no bucket is configured.
func (b *ConfiguredBackups) Run(ctx context.Context) (*BackupListResult, error) {
	l, err := b.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	l.Close()
	in := l.Installation
	if in.Spec.Backup.S3.Bucket == "" {
		return nil, inputErr(ErrNoBucket)
	}
	cl, err := connect(ctx, b.Conn, b.Cluster)
	if err != nil {
		return nil, err
	}
	store, err := configuredStore(ctx, cl, in.Spec.Namespace, in.Spec.Backup)
	if err != nil {
		return nil, err
	}
	objs, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	objs = backupstore.Of(in.Metadata.Name, objs)
	if objs == nil {
		objs = []backupstore.Object{}
	}
	return &BackupListResult{Where: store.String(), Backups: objs}, nil
}

// databasesSettled refuses a backup while a restore or an availability
// move that did not finish has the databases half replaced: such a backup
// would look whole, and retention could keep it in place of good ones.
// (A scheduled backup is suspended then too; one that was waiting for the
// lock when the operation was interrupted ends here.)
func databasesSettled(ctx context.Context, c kubernetes.Interface, ns string, st *state.State) error {
	if unfinishedRestore(st) {
		return inputErr(fmt.Errorf("the last restore into namespace %s did not finish: its databases hold part of the backup, and a backup of them would pass for a whole one; "+
			"finish the restore first (run the same onprem restore again), then back up", ns))
	}
	_, err := c.CoreV1().Secrets(ns).Get(ctx, MoveSecret, metav1.GetOptions{})
	switch {
	case err == nil:
		return inputErr(fmt.Errorf("an availability move in namespace %s did not finish (its record is the Secret %s): the databases may be empty or half restored; "+
			"finish it first (run onprem install again), then back up", ns, MoveSecret))
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("checking for an unfinished availability move (Secret %s/%s): %w", ns, MoveSecret, err)
	}
	return nil
}

// openBackup opens a backup (backup.Open); a backup that is not there, or
// that is refused (damaged, of another key, a newer format), is the
// operator's input (exit 2).
func openBackup(ctx context.Context, store backupstore.Store, name string, o backup.OpenOptions) (*backup.Opened, error) {
	opened, err := backup.Open(ctx, store, name, o)
	if err != nil {
		var nf *backupstore.NotFoundError
		if backupfile.IsRefusal(err) || errors.As(err, &nf) {
			return nil, inputErr(err)
		}
		return nil, err
	}
	return opened, nil
}
