package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/output"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Write, check and describe onprem.yaml",
	}
	cmd.AddCommand(newConfigInitCmd(), newConfigValidateCmd(), newConfigSchemaCmd())
	return cmd
}

func newConfigInitCmd() *cobra.Command {
	a := &action.ConfigInit{}
	cmd := &cobra.Command{
		Use:   "init [FILE]",
		Short: "Write a commented starter onprem.yaml",
		Long: `Write a starter onprem.yaml (or FILE) that explains every section.
Only the essentials are set; everything else is shown commented out with
its default. An existing file is never overwritten unless --force is given.`,
		Example: `  onprem config init
  onprem config init --platform-version 2.7.1 prod.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				a.Path = args[0]
			}
			if err := a.Run(); err != nil {
				return inputError{err}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: edit spec.domain, then run 'onprem config validate -c %s'\n", a.Path, a.Path)
			return nil
		},
	}
	a.Path = "onprem.yaml"
	cmd.Flags().StringVar(&a.Version, "platform-version", "", "platform version to start from (default: the newest)")
	cmd.Flags().BoolVar(&a.Force, "force", false, "overwrite an existing file")
	return cmd
}

func newConfigValidateCmd() *cobra.Command {
	a := &action.ConfigValidate{}
	var format string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check onprem.yaml: every problem at once, with file:line and the fix",
		Long: `Read onprem.yaml strictly (an unknown or misspelt field is an error),
apply ONPREM_* environment variables and flags, apply defaults and check
every value: components' values against their charts' values.schema.json,
and, with spec.overlays, the platform rendered with the overlays (a patch
that does not apply, a target that selects nothing, a pod the namespace's
restricted Pod Security would refuse). All problems are listed at once,
each with its file:line, the field path and what would be valid. Exit
code 2 when anything is wrong.

With -o yaml or -o json the effective configuration (defaults filled in)
is printed on stdout.`,
		Example: `  onprem config validate -c onprem.yaml
  ONPREM_PROFILE=large onprem config validate -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			l, err := a.Run(cmd.Context())
			if err != nil {
				return err
			}
			if format != output.Table {
				return output.Encode(cmd.OutOrStdout(), format, l.Installation)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is valid: platform %s, domain %s, namespace %s, profile %s\n",
				a.ConfigPath, l.Installation.Spec.Version, l.Installation.Spec.Domain, l.Installation.Spec.Namespace, l.Installation.Spec.Profile)
			return nil
		},
	}
	addSourceFlags(cmd, &a.Source)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table (a summary), yaml or json (the effective configuration)")
	return cmd
}

func newConfigSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of onprem.yaml, for editor completion",
		Long: `Print the JSON Schema of onprem.yaml, generated from onprem's own types.
Point your editor at it, e.g. with the YAML language server add this first
line to onprem.yaml:

  # yaml-language-server: $schema=./onprem.schema.json`,
		Example: `  onprem config schema > onprem.schema.json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := config.Schema()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(append(s, '\n'))
			return err
		},
	}
}
