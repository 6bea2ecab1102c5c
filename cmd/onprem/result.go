package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/output"
)

// checkFormat refuses (exit 2) an -o value other than table, json or yaml,
// before anything runs.
func checkFormat(format string) error {
	if err := output.Check(format, output.Table, output.JSON, output.YAML); err != nil {
		return inputError{err}
	}
	return nil
}

// runAndWrite checks -o (see checkFormat), runs an action and writes its
// result on stdout: as JSON or YAML with -o, else as print writes it for a
// person. When the action fails nothing is written and its error is
// returned.
func runAndWrite[R any](cmd *cobra.Command, format string, run func(context.Context) (R, error), print func(io.Writer, R)) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	res, err := run(cmd.Context())
	if err != nil {
		return err
	}
	return output.Write(cmd.OutOrStdout(), format, res, func(w io.Writer) { print(w, res) })
}

// writeAnyway writes an action's result when it returned one, also when
// it failed (the result then says how far it went), and returns the
// action's error (joined with a failure to write).
func writeAnyway[T any](cmd *cobra.Command, format string, res *T, err error, print func(io.Writer)) error {
	if res != nil {
		if werr := output.Write(cmd.OutOrStdout(), format, res, print); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

// progressLines reports an action's progress on w (the command's stderr),
// one line as each comes.
func progressLines(w io.Writer) func(string) {
	return func(line string) { fmt.Fprintln(w, line) }
}

// textWriter is a result that writes itself for people.
type textWriter interface {
	WriteText(io.Writer) error
}

// writeText writes res on stdout: as JSON or YAML with -o, else as its
// WriteText writes it. It returns the first failure to write.
func writeText(cmd *cobra.Command, format string, res textWriter) error {
	var werr error
	if err := output.Write(cmd.OutOrStdout(), format, res, func(w io.Writer) { werr = res.WriteText(w) }); err != nil {
		return err
	}
	return werr
}

// writeTable writes rows to w as a table: header (its columns separated by
// tabs), then a line for each row, as line formats it.
func writeTable[T any](w io.Writer, header string, rows []T, line func(T) string) {
	tw := output.NewTable(w)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, line(r))
	}
	tw.Flush()
}

// yes is "yes" when b holds, else empty: a table's column that marks one
// row among others.
func yes(b bool) string {
	if b {
		return "yes"
	}
	return ""
}
