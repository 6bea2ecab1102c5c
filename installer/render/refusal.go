package render

import (
	"errors"
	"strings"

	"onprem.dev/onprem/installer/config"
)

// refusal says what config's rules refused about a runner or a runtime
// (config.Errors at paths under path) the way the commands that install one
// by name always said it, since its values may come from flags rather than
// onprem.yaml: `runner name "X" is ...`, `runner NAME: namespace "N" is
// ...`. Each problem wraps config's FieldError, so errors.As finds it.
func refusal(kind, name, path string, err error) error {
	var es config.Errors
	if !errors.As(err, &es) {
		return err
	}
	out := make([]error, len(es))
	for i, fe := range es {
		field := strings.TrimPrefix(fe.Path, path+".")
		var subject string
		switch {
		case field == "name":
			subject = kind + " name"
		case name == "":
			subject = kind + ": " + field
		default:
			subject = kind + " " + name + ": " + field
		}
		out[i] = &ruleError{subject: subject, field: fe}
	}
	return errors.Join(out...)
}

// ruleError is one problem config's rules found, said of its subject.
type ruleError struct {
	subject string
	field   config.FieldError
}

func (e *ruleError) Error() string {
	s := e.subject + " " + e.field.Message
	if e.field.Hint != "" {
		s += "; " + e.field.Hint
	}
	return s
}

func (e *ruleError) Unwrap() error { return e.field }

// summary says in one sentence what the problems it wraps come to.
type summary struct {
	msg string
	err error
}

func (e *summary) Error() string { return e.msg }
func (e *summary) Unwrap() error { return e.err }
