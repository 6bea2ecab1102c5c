package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/gitops"
	"onprem.dev/onprem/installer/output"
)

func newRestoreCmd() *cobra.Command {
	a := &action.Restore{}
	var format, passFile string
	var yes bool
	var tokenFiles []string
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Bring the platform back from a backup: onto an empty cluster, or into the installed platform",
		Long: `Bring the platform back from a backup ('onprem backup create').

The backup is first read whole and every entry checked (a bucket's is
downloaded, still encrypted, to a temporary file): a wrong key, a damaged or
truncated file, a backup of a newer format or of a platform version this
onprem does not know is refused (exit 2) before anything is changed.

Onto an EMPTY CLUSTER (disaster recovery), it installs the backup's
platform version with the backup's configuration (or -c yours: a new
cluster's storage class, say; spec.version must be the backup's) and its
Secrets, so every service keeps its credentials and keys; it installs
everything but the services (ingress, databases, their users), restores
every database, then starts the services, then installs again the runners
and runtimes that ran on the lost cluster, with their Git sources and
managed clusters. Runners and runtimes on other clusters were not lost and
are left alone. A runtime's Git token and the platform token it registers
with are never in a backup: give them with --git-token-file NAME=FILE (or
ONPREM_GIT_TOKEN, or spec.runtimes[].gitToken) and --platform-token-file
FILE (or ONPREM_PLATFORM_TOKEN, or spec.runtimeConfig.platformToken); a
runtime without them is listed with the command that installs it later.

Into an INSTALLED PLATFORM of the backup's version (a database volume
lost, data damaged), it needs --force and a confirmation (or --yes): it
stops the services, provisions the databases' users again, replaces the
databases' contents with the backup's, and starts the services. The
Secrets in the cluster are kept.

It takes the installation's lock, is recorded in the history, shows
progress per database and component, and, killed midway, is finished by
running it again.

Exit codes: 0 restored, 1 failed (run it again to finish), 2 refused (see
above; nothing changed), 3 cluster unreachable.`,
		Example: `  # disaster recovery onto a new, empty cluster
  onprem restore --from /var/backups/onprem/onprem-20261124T020000Z.onprem-backup \
      --identity backup.key --context new-cluster --git-token-file codefresh=/run/secrets/git-token

  # the newest backup in a bucket, air-gapped
  onprem restore --from s3://backups/onprem --latest --s3-endpoint https://minio.example.com:9000 \
      --identity backup.key --bundle platform-2.7.1.bundle --public-key bundle.pub

  # a lost database volume, into the running platform
  onprem restore --from ./backups/onprem-20261124T020000Z.onprem-backup --identity backup.key --force`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormatAndPassphrase(format, &a.Keys, passFile); err != nil {
				return err
			}
			a.GitTokenFiles = map[string]string{}
			for _, tf := range tokenFiles {
				name, file, ok := strings.Cut(tf, "=")
				if !ok || name == "" || file == "" {
					return inputError{fmt.Errorf("--git-token-file %q: give RUNTIME=FILE (the file holds the runtime's Git token)", tf)}
				}
				a.GitTokenFiles[name] = file
			}
			a.Confirmed = yes
			if a.Force && !yes {
				a.Confirmed = confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), "Replace the running platform's databases' contents with the backup's?")
			}
			a.Progress = backupProgress(cmd.ErrOrStderr())
			a.Preflight = printPreflightSummary(cmd.ErrOrStderr())
			rep, stop := progress(cmd.ErrOrStderr())
			a.Reporter = rep
			res, err := a.Run(cmd.Context())
			stop()
			return writeAnyway(cmd, format, res, err, func(w io.Writer) { printRestore(w, res, err == nil) })
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	cmd.Flags().StringVar(&a.From, "from", "", "the backup: a file, s3://BUCKET/PREFIX/NAME.onprem-backup, or with --latest a folder or s3://BUCKET[/PREFIX]")
	cmd.Flags().BoolVar(&a.Latest, "latest", false, "restore the newest backup at --from")
	destinationFlags(cmd, &a.Destination, "", "")
	keyFlags(cmd, &a.Keys, false, &passFile)
	cmd.Flags().StringVarP(&a.ConfigPath, "config", "c", "", "restore with this configuration instead of the backup's (its spec.version must be the backup's)")
	cmd.Flags().StringArrayVar(&a.Bundles, "bundle", nil, "install from this air-gapped bundle of the backup's version ('onprem bundle create')")
	addTrustFlags(cmd, &a.PublicKeys, &a.AllowUnsigned)
	cmd.Flags().BoolVar(&a.Force, "force", false, "restore into an installed platform, replacing its databases' contents")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm --force without asking")
	cmd.Flags().BoolVar(&a.IncludeRedis, "include-redis", false, "also restore Redis's data when the backup has it")
	cmd.Flags().StringVar(&a.PlatformTokenFile, "platform-token-file", "", "file holding the platform token the runtimes register with again (default: $"+gitops.PlatformTokenEnv+" or spec.runtimeConfig.platformToken)")
	cmd.Flags().StringArrayVar(&tokenFiles, "git-token-file", nil, "RUNTIME=FILE: the Git token of a runtime to install again (repeatable; default: $"+gitops.TokenEnv+" or spec.runtimes[].gitToken)")
	addFetchFlags(cmd.Flags(), &a.RuntimeFetch)
	cmd.Flags().StringArrayVar(&a.SkipChecks, "skip-check", nil, "skip this preflight check (repeatable; recorded in the state)")
	cmd.Flags().IntVar(&a.Concurrency, "concurrency", apply.DefaultConcurrency, "components applied at once")
	cmd.Flags().DurationVar(&a.Timeout, "timeout", apply.DefaultTimeout, "how long each component may take to be ready")
	cmd.Flags().StringVar(&a.WorkDir, "work-dir", "", "where a backup from a bucket is downloaded to (default: the system's temporary folder)")
	addLockFlags(cmd, &a.LockWait, &a.LockLease)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

func printRestore(w io.Writer, res *action.RestoreResult, ok bool) {
	verb := "restored"
	if !ok {
		verb = "restore not finished:"
	}
	fmt.Fprintf(w, "%s %s (platform %s, made %s) into namespace %s (%s)\n", verb, res.Backup, res.Version, res.Created.Format("2006-01-02 15:04:05 MST"), res.Namespace, res.Mode)
	if len(res.Databases) > 0 {
		fmt.Fprintf(w, "  databases: %s\n", strings.Join(res.Databases, ", "))
	}
	attached := false
	for _, r := range res.Runners {
		attached = attached || r.Elapsed > 0
		fmt.Fprintf(w, "  runner %s: %s%s\n", r.Name, r.Outcome, attachmentDetail(r))
	}
	for _, r := range res.Runtimes {
		attached = attached || r.Elapsed > 0
		fmt.Fprintf(w, "  runtime %s: %s%s\n", r.Name, r.Outcome, attachmentDetail(r))
	}
	for _, t := range res.Todo {
		fmt.Fprintf(w, "  to do: %s\n", t)
	}
	if ok {
		took := round(res.Elapsed).String()
		if attached && res.Serving > 0 {
			took += " (the platform served again after " + round(res.Serving).String() + "; then its runners and runtimes)"
		}
		fmt.Fprintf(w, "  in %s; check it with: onprem status --namespace %s\n", took, res.Namespace)
	}
}

// attachmentDetail is what follows a runner's or runtime's outcome: its
// time when it was installed (or tried), and the message.
func attachmentDetail(r action.AttachmentResult) string {
	s := ""
	if r.Elapsed > 0 {
		s += " in " + round(r.Elapsed).String()
	}
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s
}
