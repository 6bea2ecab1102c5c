package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/installer/rotate"
)

func newRotateCmd() *cobra.Command {
	a := &action.RotateList{}
	var format string
	var list bool
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "List the secrets onprem manages with their age, and rotate them",
		Long: `Secrets that onprem generates (database passwords, keys, the self-signed CA
and certificate) are made once and never changed behind your back. 'rotate'
changes them when you decide to: a leak, an auditor's policy, an expiry.

  onprem rotate --list          every Secret onprem manages in the platform's
                                namespace: kind, owner, keys (never values),
                                age, and each certificate's expiry (a warning
                                within 30 days, an error within 7)
  onprem rotate certificates    a new serving certificate; --ca a new CA
                                trusted beside the old one; --retire-ca the
                                old CA retired
  onprem rotate credentials     new database logins (PostgreSQL, MongoDB,
                                RabbitMQ) and Redis password for the
                                services, none ever disconnected, and new
                                admins (PostgreSQL, MongoDB)
  onprem rotate keys            new signing and encryption keys, the old ones
                                still verifying and decrypting; --retire
                                drops the old ones`,
		Example: `  onprem rotate --list
  onprem rotate --list -o json
  onprem rotate certificates --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !list {
				return inputError{fmt.Errorf("say what to do: 'onprem rotate --list', or a kind to rotate: 'onprem rotate certificates' (see --help)")}
			}
			return runAndWrite(cmd, format, a.Run, printRotateList)
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	addTargetFlags(cmd, &a.Target)
	cmd.Flags().BoolVar(&list, "list", false, "list the Secrets onprem manages, their age and their certificates' expiry")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	cmd.AddCommand(newRotateCertificatesCmd(), newRotateCredentialsCmd(), newRotateKeysCmd())
	return cmd
}

func printRotateList(w io.Writer, res *action.RotateListResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SECRET\tKIND\tOWNER\tAGE\tSINCE\tROTATE WITH")
	for _, it := range res.Secrets {
		with := it.Rotate
		switch {
		case it.Owner == rotate.OwnerOperator:
			with = "(yours: renew it where it comes from)"
		case with == "":
			with = "(not yet)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%dd\t%s\t%s\n", it.Secret, it.Kind, it.Owner, it.AgeDays, it.Since.Format(time.DateOnly), with)
	}
	tw.Flush()
	for _, it := range res.Secrets {
		for _, c := range it.Certificates {
			fmt.Fprintln(w, certificateLine(c.Certificate, c.Level, c.DaysLeft))
		}
	}
}

func newRotateCertificatesCmd() *cobra.Command {
	a := &action.RotateCertificates{}
	var format string
	var newCA, retire bool
	cmd := &cobra.Command{
		Use:   "certificates [--ca | --retire-ca] [--dry-run]",
		Short: "Renew the platform's self-signed certificate, or rotate its CA with an overlap",
		Long: `Rotate the certificate onprem made for the platform's domain (tls.mode
selfSigned, Secret onprem-tls). Three steps, each one write of that Secret:

  (no flag)     a new serving certificate and key for DOMAIN and *.DOMAIN,
                signed by the same CA and valid 825 days: clients change
                nothing. The ingress controller serves it within seconds,
                without a restart.
  --ca          a new CA, added to ca.crt beside the old one (the overlap).
                The serving certificate stays as it is, so nothing fails
                while you hand the new ca.crt to clients: trust stores, and
                the runners' and runtimes' copies with
                'onprem runner upgrade --all' / 'onprem runtime upgrade --all'.
  --retire-ca   a new serving certificate signed by the new CA, and ca.crt
                keeps only that CA: the old CA validates nothing that reads
                ca.crt any more. Run it once every client has the new ca.crt.

A renewal during the overlap signs with the new CA. Installations made
before onprem kept the CA's key cannot renew under the same CA: start with
--ca. The operator's own certificate (tls.secretName) is never changed:
renew it where it comes from.

Every rotation takes the installation's lock and is recorded in the history
(onprem status); --dry-run says what would change and writes nothing. A run
that is killed has written all of its one Secret or none of it: run it again.

Exit code 0 when rotated (or nothing to do), 2 when refused (nothing
changed), 3 when the cluster cannot be reached.`,
		Example: `  onprem rotate certificates --dry-run
  onprem rotate certificates
  onprem rotate certificates --ca
  onprem rotate certificates --retire-ca`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			switch {
			case newCA && retire:
				return inputError{fmt.Errorf("--ca and --retire-ca are two steps: run --ca, give clients the new ca.crt, then run --retire-ca")}
			case newCA:
				a.Mode = rotate.NewCA
			case retire:
				a.Mode = rotate.RetireCA
			default:
				a.Mode = rotate.Renew
			}
			return runAndWrite(cmd, format, a.Run, printRotateCertificates)
		},
	}
	addRotationFlags(cmd, &a.Target, &a.LockWait, &a.LockLease, &a.DryRun, &format)
	cmd.Flags().BoolVar(&newCA, "ca", false, "make a new CA, trusted beside the old one until --retire-ca (the serving certificate stays)")
	cmd.Flags().BoolVar(&retire, "retire-ca", false, "serve a certificate of the new CA and stop trusting the old one")
	return cmd
}

func printRotateCertificates(w io.Writer, res *action.RotateCertificatesResult) {
	printSecretRotated(w, res.Secret, res.DryRun, res.Changed, res.Summary)
	if res.Changed {
		for _, c := range res.After {
			what := "certificate"
			if c.IsCA {
				what = "CA"
			}
			fmt.Fprintf(w, "  %s %s (%s): valid until %s\n", what, c.Subject, c.Key, c.NotAfter.Format(time.DateOnly))
		}
	}
	if len(res.Next) > 0 {
		fmt.Fprintln(w, "next:")
		for _, n := range res.Next {
			fmt.Fprintln(w, "  "+strings.TrimSpace(n))
		}
	}
}

func newRotateCredentialsCmd() *cobra.Command {
	a := &action.RotateCredentials{}
	var format string
	var all bool
	cmd := &cobra.Command{
		Use:   "credentials (--all | --database ENGINE... | --component NAME... | --admin) [--dry-run]",
		Short: "Give the services' own database logins new passwords, without disconnecting them",
		Long: `Rotate the database logins onprem generated for the services (Secrets
onprem-<service>-postgresql and onprem-<service>-mongodb, and RabbitMQ's
login and Redis's password that every service shares, onprem-rabbitmq and
onprem-redis), in an order that keeps every service connected:

  1. the service's other login (each has two: <name> and <name>_2) gets a
     new password, written to the Secret first, then set in the database
     as its admin, in the database's pod (the db-provision Job's own
     script; rabbitmqctl for RabbitMQ);
  2. the Secret switches to that login;
  3. every Deployment and StatefulSet that reads the Secret rolls onto it
     (old pods keep working with the old login until they are replaced);
  4. the old login is revoked and refused from then on. PostgreSQL: no
     LOGIN, no password, its sessions ended. MongoDB: a new random
     password that nobody holds. RabbitMQ: the user deleted, its
     connections closed. The database's own pods are never restarted.

Redis has no second user: its default user holds the old and the new
password side by side until the services have rolled and the password file
Redis's own probe reads (mounted from onprem-redis) holds the new one; then
only the new one is accepted.

In PostgreSQL the second login is a member of the role that owns the
service's database and becomes it in every session, so what a service
creates belongs to the owner whichever login it uses: the two logins
alternate at every rotation and no data moves.

  --all                   every service's logins on every database onprem
                          runs (PostgreSQL, MongoDB, RabbitMQ, Redis), and
                          the PostgreSQL and MongoDB admins
  --database ENGINE       postgresql, mongodb, rabbitmq or redis
                          (repeatable)
  --component NAME        only that service's logins (repeatable; with
                          --database, only on that engine)
  --admin                 the admins instead of the services' logins
                          (with --database: only those engines' admins),
                          which onprem's scripts and Jobs use:
                          PostgreSQL (onprem-postgresql-admin): its next
                          password is first written to the Secret and
                          onprem waits until the database's pod sees it
                          (the scripts there then accept either), then
                          ALTER ROLE, then the Secret switches: the old
                          password is refused at once.
                          MongoDB (onprem-mongodb-admin): alternates like a
                          service's login (root, root_2), created with the
                          root role by the current admin; the old user is
                          dropped once the database's pod sees the new one

A run that is killed, or that fails (a rollout that does not finish within
--timeout), leaves every service with a login its database accepts: run
the same command again and it finishes what the first one started. Every
rotation takes the installation's lock and is recorded in the history (the
logins, never a password); --dry-run says what would change and writes
nothing.

Not rotated by onprem: databases in external mode (their credentials are
yours; naming one is refused, exit 2, nothing changed).

Several engines rotated at once (--all) switch every Secret first, roll
each service once, then revoke every old login: one round of restarts.

Exit code 0 when rotated, 2 when refused (nothing changed), 3 when the
cluster cannot be reached, 1 when a step failed (run it again).`,
		Example: `  onprem rotate credentials --all --dry-run
  onprem rotate credentials --all
  onprem rotate credentials --database postgresql
  onprem rotate credentials --admin
  onprem rotate credentials --database mongodb --admin
  onprem rotate credentials --component audit-manager -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			switch {
			case all && (len(a.Engines) > 0 || len(a.Components) > 0 || a.Admin):
				return inputError{fmt.Errorf("--all rotates every login and every admin: give it alone, or name --database, --component or --admin instead")}
			case !all && len(a.Engines) == 0 && len(a.Components) == 0 && !a.Admin:
				return inputError{fmt.Errorf("say which logins: --all, --database postgresql|mongodb|rabbitmq|redis, --component NAME or --admin (see --help)")}
			}
			if a.Admin {
				// --admin names the admins; --database, whose.
				if len(a.Components) > 0 {
					return inputError{fmt.Errorf("--admin rotates the databases' admins and --component a service's logins: run them one after the other")}
				}
				if len(a.Engines) > 0 {
					a.Admin, a.Admins, a.Engines = false, a.Engines, nil
				}
			}
			a.Progress = progressLines(cmd.ErrOrStderr())
			return runAndWrite(cmd, format, a.Run, printRotateCredentials)
		},
	}
	addRotationFlags(cmd, &a.Target, &a.LockWait, &a.LockLease, &a.DryRun, &format)
	cmd.Flags().StringArrayVar(&a.Engines, "database", nil, "the engine whose service logins to rotate: postgresql, mongodb, rabbitmq or redis (repeatable)")
	cmd.Flags().StringArrayVar(&a.Components, "component", nil, "rotate only this service's logins (repeatable)")
	cmd.Flags().BoolVar(&all, "all", false, "rotate every service login on every database onprem runs, and the PostgreSQL and MongoDB admins")
	cmd.Flags().BoolVar(&a.Admin, "admin", false, "rotate the admins (PostgreSQL, MongoDB; with --database: only those engines') instead of the services' logins")
	cmd.Flags().DurationVar(&a.Timeout, "timeout", 5*time.Minute, "how long each restarted workload may take to roll out")
	return cmd
}

func printRotateCredentials(w io.Writer, res *action.RotateCredentialsResult) {
	verb := "switched"
	if res.DryRun {
		verb = "would switch (dry run, nothing written)"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "DATABASE\tSERVICE\tSECRET\tLOGIN\tNOTE\n")
	n := 0
	var restarted []string
	for _, e := range res.Engines {
		for _, l := range e.Logins {
			note := ""
			if l.Resumed != "" {
				note = "finished a rotation interrupted while " + l.Resumed
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s → %s\t%s\n", e.Engine, l.Service, l.Secret, l.From, l.To, note)
			n++
		}
		for _, r := range e.Restarted {
			if !slices.Contains(restarted, r) {
				restarted = append(restarted, r)
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "%s %d login(s)", verb, n)
	if !res.DryRun {
		fmt.Fprintf(w, "; the old ones are refused now")
	}
	fmt.Fprintln(w)
	printRestarted(w, restarted, res.DryRun)
}

func newRotateKeysCmd() *cobra.Command {
	a := &action.RotateKeys{}
	var format string
	cmd := &cobra.Command{
		Use:   "keys [--retire] [--dry-run]",
		Short: "Rotate the platform's signing and encryption keys with a key ring",
		Long: `Rotate the keys the services sign tokens and encrypt data with (Secret
onprem-platform-keys). Each kind of key has a ring: the current key signs
or encrypts, every key of the ring verifies or decrypts, so tokens issued
and data encrypted before a rotation stay valid.

  (no flag)   new keys, in two steps that keep every request working:
                1. the new keys join the rings, and every service that
                   reads them restarts: each pod now accepts the new keys,
                   but still signs and encrypts with the old ones;
                2. the new keys sign and encrypt, and the services restart
                   again. Whatever a pod makes, every other pod, restarted
                   or not, accepts.
  --retire    the rings keep only the current keys, and the services
              restart: tokens signed and data encrypted with an older key
              are refused from then on. Run it once tokens issued before
              the rotation have expired and old data is re-encrypted.

A run that is killed, or that fails (a rollout that does not finish within
--timeout), is finished by the same command run again: the Secret records
the step it reached. Every rotation takes the installation's lock and is
recorded in the history (never a key); --dry-run says what would change and
writes nothing. The operator's own Secret (without the label
onprem.dev/generated=true) is never changed.

Exit code 0 when rotated (or nothing to retire), 2 when refused (nothing
changed), 3 when the cluster cannot be reached, 1 when a step failed (run
it again).`,
		Example: `  onprem rotate keys --dry-run
  onprem rotate keys
  onprem rotate keys --retire`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			a.Progress = progressLines(cmd.ErrOrStderr())
			return runAndWrite(cmd, format, a.Run, printRotateKeys)
		},
	}
	addRotationFlags(cmd, &a.Target, &a.LockWait, &a.LockLease, &a.DryRun, &format)
	cmd.Flags().BoolVar(&a.Retire, "retire", false, "keep only the current keys: tokens and data of older keys are refused from then on")
	cmd.Flags().DurationVar(&a.Timeout, "timeout", 5*time.Minute, "how long each restarted workload may take to roll out")
	return cmd
}

func printRotateKeys(w io.Writer, res *rotate.KeysResult) {
	printSecretRotated(w, res.Secret, res.DryRun, res.Changed, res.Summary)
	if res.Resumed != "" {
		fmt.Fprintf(w, "finished a rotation interrupted while %s\n", res.Resumed)
	}
	fmt.Fprintf(w, "keys in each ring: %d before, %d after\n", res.RingBefore, res.RingAfter)
	printRestarted(w, res.Restarted, res.DryRun)
}

// addRotationFlags adds the flags every 'onprem rotate' kind takes: the
// cluster and the installation (see addClusterFlags, addTargetFlags), the
// installation's lock, --dry-run and -o.
func addRotationFlags(cmd *cobra.Command, t *action.Target, lockWait, lockLease *time.Duration, dryRun *bool, format *string) {
	addClusterFlags(cmd, &t.Cluster)
	addTargetFlags(cmd, t)
	addLockFlags(cmd, lockWait, lockLease)
	cmd.Flags().BoolVar(dryRun, "dry-run", false, "say what would change; write nothing")
	cmd.Flags().StringVarP(format, "output", "o", output.Table, "output: table, json or yaml")
}

// printSecretRotated writes the first line of a rotation of one Secret:
// its name, whether it was rotated, would be (a dry run) or was left
// unchanged (nothing to do), and the rotation's summary.
func printSecretRotated(w io.Writer, secret string, dryRun, changed bool, summary string) {
	verb := "rotated"
	switch {
	case dryRun:
		verb = "would rotate (dry run, nothing written)"
	case !changed:
		verb = "unchanged"
	}
	fmt.Fprintf(w, "%s %s: %s\n", secret, verb, summary)
}

// printRestarted writes the workloads a rotation restarted (in a dry run,
// would restart) to read the new Secret; nothing when there are none.
func printRestarted(w io.Writer, restarted []string, dryRun bool) {
	if len(restarted) == 0 {
		return
	}
	what := "restarted"
	if dryRun {
		what = "would restart"
	}
	fmt.Fprintf(w, "%s: %s\n", what, strings.Join(restarted, ", "))
}
