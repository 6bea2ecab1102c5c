package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/backupstore"
	"onprem.dev/onprem/installer/output"
)

// PassphraseEnv holds a backup passphrase (instead of --passphrase-file).
const PassphraseEnv = "ONPREM_BACKUP_PASSPHRASE"

func newBackupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Back up the platform (databases, Secrets, state, configuration), encrypted, to a folder or an S3 bucket",
		Long: `Back up everything needed to bring the platform back on a new cluster:

  - a logical dump of every MongoDB and PostgreSQL database of the platform,
    one per service, taken with the engines' own tools (mongodump --archive,
    pg_dump --format=custom) inside the database pods and streamed out
    through the API server: nothing is stored in the cluster;
  - RabbitMQ's definitions (users, vhosts, queues, exchanges, bindings,
    policies); messages in flight are NOT part of a backup;
  - Redis's data with --include-redis (the platform uses it as a cache);
  - the generated Secrets (database credentials, each service's own, the
    signing and encryption keys, the self-signed CA), the state record, the
    effective configuration with its overlay folders, and the registrations
    of runners, runtimes, Git sources and managed clusters. Git tokens are
    never in a backup: they live only on each runtime's cluster, and
    'onprem restore' asks for them again.

The whole file is encrypted with age to your public key (--recipient, from
'onprem backup keygen') or a passphrase: nothing in it is readable without
the key, and a changed or truncated file is refused.

  onprem backup keygen                     a key pair for backups
  onprem backup create --to DEST           one backup
  onprem backup list --from DEST           the backups there
  onprem backup inspect BACKUP             decrypt, check every byte, describe
  onprem backup delete BACKUP              delete one
  onprem restore --from BACKUP             bring the platform back

DEST is a folder on this machine or s3://BUCKET[/PREFIX] with --s3-endpoint
(credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a Secret
of the platform namespace: --s3-credentials-secret). Scheduled backups:
spec.backup in onprem.yaml.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBackupKeygenCmd(), newBackupCreateCmd(), newBackupListCmd(), newBackupInspectCmd(), newBackupDeleteCmd())
	return cmd
}

// destinationFlags adds the flags of a backup destination; name is --to or
// --from.
func destinationFlags(cmd *cobra.Command, d *action.BackupDestination, name, usage string) {
	f := cmd.Flags()
	if name != "" {
		f.StringVar(&d.To, name, "", usage)
	}
	f.StringVar(&d.S3.Endpoint, "s3-endpoint", "", "the S3-compatible server's URL: https://HOST[:PORT] (http:// for a lab server only)")
	f.StringVar(&d.S3.Region, "s3-region", "", "the bucket's region, when the server wants one")
	f.StringVar(&d.S3.CAFile, "s3-ca-file", "", "PEM file of the CA that signed the server's certificate (besides the system's)")
	f.StringVar(&d.S3CredentialsSecret, "s3-credentials-secret", "", "a Secret of the platform namespace with the keys accessKeyID and secretAccessKey (default: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
}

// keyFlags adds the key flags: recipients to encrypt to, or identities to
// decrypt with, and a passphrase file for both.
func keyFlags(cmd *cobra.Command, k *backupfile.Keys, encrypt bool, passFile *string) {
	f := cmd.Flags()
	if encrypt {
		f.StringArrayVar(&k.Recipients, "recipient", nil, "public key to encrypt to (age1pq1..., from 'onprem backup keygen'; repeatable)")
		f.StringArrayVar(&k.RecipientFiles, "recipient-file", nil, "file of public keys to encrypt to, one per line (repeatable)")
	} else {
		f.StringArrayVar(&k.IdentityFiles, "identity", nil, "private key file to decrypt with (backup.key from 'onprem backup keygen'; repeatable)")
	}
	f.StringVar(passFile, "passphrase-file", "", "file holding a passphrase, instead of keys (or "+PassphraseEnv+"); never give it on the command line")
}

// readPassphrase fills k.Passphrase from the file or the environment.
func readPassphrase(k *backupfile.Keys, file string) error {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return inputError{fmt.Errorf("--passphrase-file: %w", err)}
		}
		k.Passphrase = strings.TrimRight(string(data), "\r\n")
		if k.Passphrase == "" {
			return inputError{fmt.Errorf("--passphrase-file %s is empty", file)}
		}
		return nil
	}
	k.Passphrase = os.Getenv(PassphraseEnv)
	return nil
}

// checkFormatAndPassphrase makes the input checks of the commands that
// encrypt or decrypt a backup, before anything runs: -o (see checkFormat),
// then the passphrase, read into k (see readPassphrase).
func checkFormatAndPassphrase(format string, k *backupfile.Keys, passFile string) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	return readPassphrase(k, passFile)
}

// backupProgress prints one line per step of a backup or restore on
// stderr.
func backupProgress(w io.Writer) func(backup.Progress) {
	return func(p backup.Progress) {
		var b strings.Builder
		fmt.Fprintf(&b, "%-28s %-8s", p.Item, p.Phase)
		if p.Bytes > 0 {
			fmt.Fprintf(&b, " %s", size(p.Bytes))
		}
		if p.Elapsed > 0 {
			fmt.Fprintf(&b, " in %s", round(p.Elapsed))
		}
		if p.Message != "" {
			fmt.Fprintf(&b, "  %s", p.Message)
		}
		if p.Err != nil {
			fmt.Fprintf(&b, "  %v", p.Err)
		}
		if p.Phase == backup.PhaseProgress {
			b.Reset()
			fmt.Fprintf(&b, "== %s", p.Message)
		}
		fmt.Fprintln(w, b.String())
	}
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func newBackupKeygenCmd() *cobra.Command {
	a := &action.BackupKeygen{}
	var format string
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Write a key pair for backups: backup.key (private) and backup.pub (public)",
		Long: `Write a new key pair into --out: backup.key, the private key (mode 0600),
and backup.pub, the public key. The key is post-quantum (ML-KEM-768 with
X25519, age's hybrid recipient): backups are kept for years.

Backups are encrypted to the public key: give it to 'onprem backup create
--recipient-file backup.pub' or put it in spec.backup.recipients. Keep the
private key away from the cluster and the backups, where the people who
restore can reach it: without it no backup made for it can be read, and
with it every one can. Existing files are never overwritten.`,
		Example: `  onprem backup keygen --out ~/.onprem/backup-keys`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAndWrite(cmd, format, a.Run, func(w io.Writer, res *backupfile.KeygenResult) {
				fmt.Fprintf(w, "private key: %s (keep it safe: it reads every backup made for it)\n", res.IdentityFile)
				fmt.Fprintf(w, "public key:  %s\n%s\n", res.RecipientFile, res.Recipient)
			})
		},
	}
	cmd.Flags().StringVar(&a.Out, "out", ".", "folder to write backup.key and backup.pub into (made if missing)")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

func newBackupCreateCmd() *cobra.Command {
	a := &action.BackupCreate{}
	var format, passFile string
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Back up the platform to a folder or an S3 bucket",
		Long: `Back up the platform (see 'onprem backup --help' for what a backup holds).

The databases are dumped one by one with their engines' own tools in their
pods, while the platform keeps running: each database's dump is consistent
in itself (pg_dump's snapshot; mongodump collection by collection), and
messages in flight in RabbitMQ are not kept. The backup takes the
installation's lock (an upgrade waits for it) and is recorded in the
history that 'onprem status' shows.

It is written under a temporary name (a folder) or as a multipart upload
(a bucket), and appears under its name, INSTALLATION-TIMESTAMP.onprem-backup,
only when whole: an error, a full disk or a kill leaves nothing that looks
like a backup. --keep N then deletes the oldest backups of the installation
there, so that N remain.

Exit codes: 0 written, 1 failed (nothing kept), 2 bad input (no key, a bad
destination), 3 cluster unreachable.`,
		Example: `  onprem backup create --to /var/backups/onprem --recipient-file backup.pub
  export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...
  onprem backup create --to s3://backups/onprem --s3-endpoint https://minio.example.com:9000 \
      --s3-ca-file ca.crt --recipient-file backup.pub --keep 14
  ONPREM_BACKUP_PASSPHRASE=... onprem backup create --to ./backups --include-redis`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormatAndPassphrase(format, &a.Keys, passFile); err != nil {
				return err
			}
			a.Progress = backupProgress(cmd.ErrOrStderr())
			return runAndWrite(cmd, format, a.Run, func(w io.Writer, res *action.BackupCreateResult) {
				m := res.Manifest
				fmt.Fprintf(w, "backup %s written to %s: %s, platform %s, %d databases, in %s\n",
					res.Name, res.Where, size(res.Size), m.Version, len(m.Databases()), round(res.Elapsed))
				for _, p := range res.Pruned {
					fmt.Fprintf(w, "deleted (--keep %d): %s\n", a.Keep, p)
				}
			})
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	cmd.Flags().StringVar(&a.Namespace, "namespace", "", "platform namespace (default: from -c if the file exists, else onprem)")
	cmd.Flags().StringVarP(&a.ConfigPath, "config", "c", "", "the configuration to put in the backup (default: the one the last install or upgrade kept in the cluster)")
	destinationFlags(cmd, &a.Destination, "to", "where to write it: a folder, or s3://BUCKET[/PREFIX]")
	keyFlags(cmd, &a.Keys, true, &passFile)
	cmd.Flags().BoolVar(&a.IncludeRedis, "include-redis", false, "also back up Redis's data (a cache: rebuilt by the platform when left out)")
	cmd.Flags().IntVar(&a.Keep, "keep", 0, "then delete the oldest backups of the installation at the destination so that this many remain (0: keep all)")
	cmd.Flags().StringVar(&a.Trigger, "trigger", backupfile.TriggerManual, "what started it, recorded in the backup: manual or schedule")
	_ = cmd.Flags().MarkHidden("trigger")
	addLockFlags(cmd, &a.LockWait, &a.LockLease)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

func newBackupListCmd() *cobra.Command {
	a := &action.BackupList{}
	var format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the backups at a folder or an S3 bucket, oldest first",
		Long: `List the backups at a destination: name, size and time. Incomplete uploads
and temporary files are never listed. The backups are encrypted: use
'onprem backup inspect' (with the key) for what one holds.`,
		Example: `  onprem backup list --from /var/backups/onprem
  onprem backup list --from s3://backups/onprem --s3-endpoint https://minio.example.com:9000 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAndWrite(cmd, format, a.Run, func(w io.Writer, res *action.BackupListResult) {
				if len(res.Backups) == 0 {
					fmt.Fprintf(w, "no backup at %s\n", res.Where)
					return
				}
				writeTable(w, "NAME\tSIZE\tWRITTEN", res.Backups, func(b backupstore.Object) string {
					return fmt.Sprintf("%s\t%s\t%s", b.Name, size(b.Size), b.Modified.Format(time.RFC3339))
				})
			})
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	cmd.Flags().StringVar(&a.Namespace, "namespace", "", "platform namespace, for --s3-credentials-secret (default: onprem)")
	destinationFlags(cmd, &a.Destination, "from", "where the backups are: a folder, or s3://BUCKET[/PREFIX]")
	cmd.Flags().StringVar(&a.Installation, "installation", "", "only this installation's backups (metadata.name)")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

func newBackupInspectCmd() *cobra.Command {
	a := &action.BackupInspect{}
	var format, passFile string
	cmd := &cobra.Command{
		Use:   "inspect BACKUP",
		Short: "Decrypt a backup, check every entry, and say what it holds",
		Long: `Read a whole backup with the key, check every entry against its manifest,
and print the manifest: the platform and onprem versions, when it was made,
each database with its size and SHA-256, the components, the registrations
and the names of the Secrets (never their values). A backup from a bucket
is downloaded first (still encrypted) to a temporary file.

BACKUP is a file, s3://BUCKET/PREFIX/NAME.onprem-backup, or a name at --from.

Exit codes: 0 whole, 2 refused (wrong key, damaged or truncated, a newer
format), 1 could not be read.`,
		Example: `  onprem backup inspect /var/backups/onprem/onprem-20261124T020000Z.onprem-backup --identity backup.key
  onprem backup inspect onprem-20261124T020000Z.onprem-backup --from s3://backups/onprem \
      --s3-endpoint https://minio.example.com:9000 --identity backup.key -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormatAndPassphrase(format, &a.Keys, passFile); err != nil {
				return err
			}
			a.Backup = args[0]
			return runAndWrite(cmd, format, a.Run, printInspect)
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	cmd.Flags().StringVar(&a.Namespace, "namespace", "", "platform namespace, for --s3-credentials-secret (default: onprem)")
	destinationFlags(cmd, &a.Destination, "from", "where BACKUP is, when it is a name: a folder, or s3://BUCKET[/PREFIX]")
	keyFlags(cmd, &a.Keys, false, &passFile)
	cmd.Flags().StringVar(&a.WorkDir, "work-dir", "", "where a backup from a bucket is downloaded to (default: the system's temporary folder)")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

func printInspect(w io.Writer, res *action.BackupInspectResult) {
	m := res.Manifest
	fmt.Fprintf(w, "backup %s at %s: whole (every entry matches its checksum)\n", res.Name, res.Where)
	fmt.Fprintf(w, "  installation %s, namespace %s, platform %s\n", m.Installation, m.Namespace, m.Version)
	fmt.Fprintf(w, "  made %s by onprem %s on %s (%s), format %d\n", m.Created.Format(time.RFC3339), m.Installer, m.Host, m.Trigger, m.Format)
	fmt.Fprintf(w, "  components: %s\n", strings.Join(m.Components, ", "))
	writeTable(w, "  ENTRY\tKIND\tSIZE\tSHA-256", m.Entries, func(e backupfile.Entry) string {
		return fmt.Sprintf("  %s\t%s\t%s\t%s", e.Name, e.Kind, size(e.Size), e.SHA256)
	})
	fmt.Fprintf(w, "  secrets (values not shown): %s\n", strings.Join(res.Secrets, ", "))
	var regs []string
	for n := range res.Registrations.Runners {
		regs = append(regs, "runner "+n)
	}
	for n := range res.Registrations.Runtimes {
		regs = append(regs, "runtime "+n)
	}
	if len(regs) > 0 {
		fmt.Fprintf(w, "  registrations: %s\n", strings.Join(regs, ", "))
	}
}

func newBackupDeleteCmd() *cobra.Command {
	a := &action.BackupDelete{}
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete BACKUP",
		Short: "Delete a backup from a folder or an S3 bucket",
		Long: `Delete one backup. BACKUP is a file, s3://BUCKET/PREFIX/NAME.onprem-backup,
or a name at --from. It asks for confirmation on a terminal, or needs --yes.`,
		Example: `  onprem backup delete /var/backups/onprem/onprem-20261124T020000Z.onprem-backup --yes
  onprem backup delete onprem-20261124T020000Z.onprem-backup --from s3://backups/onprem --s3-endpoint https://minio.example.com:9000 --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.Backup = args[0]
			if !yes && !confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), "Delete backup "+args[0]+"? This cannot be undone.") {
				return inputError{errors.New("not confirmed: give --yes to delete without asking")}
			}
			msg, err := a.Run(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	cmd.Flags().StringVar(&a.Namespace, "namespace", "", "platform namespace, for --s3-credentials-secret (default: onprem)")
	destinationFlags(cmd, &a.Destination, "from", "where BACKUP is, when it is a name: a folder, or s3://BUCKET[/PREFIX]")
	cmd.Flags().BoolVar(&yes, "yes", false, "delete without asking")
	return cmd
}
