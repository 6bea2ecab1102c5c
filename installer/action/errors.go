package action

// InputError marks an error in what the operator gave (a flag, an argument,
// a path): nothing was done, and the fix is on the operator's side. The CLI
// exits with code 2 for it, as for configuration errors.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// inputErr wraps err as an InputError (nil stays nil).
func inputErr(err error) error {
	if err == nil {
		return nil
	}
	return &InputError{Err: err}
}
