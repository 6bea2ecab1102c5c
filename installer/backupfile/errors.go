package backupfile

import (
	"errors"
	"fmt"
)

// KeyError: the backup cannot be decrypted with the identities or
// passphrase given (it was encrypted to other recipients).
type KeyError struct {
	// Stanzas are the kinds of recipients the file was encrypted to
	// (X25519, mlkem768x25519, scrypt), as its header says.
	Stanzas []string
	Err     error
}

func (e *KeyError) Error() string {
	msg := "the backup cannot be decrypted with the key given: it was encrypted to another key"
	if len(e.Stanzas) > 0 {
		msg += fmt.Sprintf(" (its recipients are of type %v)", e.Stanzas)
	}
	return msg + "; give the identity file it was made for (--identity, written by 'onprem backup keygen') or its passphrase (--passphrase-file or ONPREM_BACKUP_PASSPHRASE)"
}

func (e *KeyError) Unwrap() error { return e.Err }

// CorruptError: the file is not a whole, unchanged onprem backup: it is
// truncated, a byte changed, an entry is missing or does not match the
// manifest's checksum, or it is not a backup at all.
type CorruptError struct {
	// Entry is the entry being read when the problem was found ("" for the
	// file's header).
	Entry  string
	Reason string
	Err    error
}

func (e *CorruptError) Error() string {
	where := "the backup"
	if e.Entry != "" {
		where = fmt.Sprintf("the backup (at entry %s)", e.Entry)
	}
	msg := fmt.Sprintf("%s is damaged: %s", where, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; nothing was restored from it: use another copy of the backup"
}

func (e *CorruptError) Unwrap() error { return e.Err }

// FormatError: the backup was written in a newer format than this onprem
// reads.
type FormatError struct {
	Format    int
	Installer string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("the backup was written by onprem %s in backup format %d, newer than this onprem reads (up to %d): use onprem %s or later",
		e.Installer, e.Format, FormatVersion, e.Installer)
}

// IsRefusal reports whether err says that the backup itself cannot be used
// (wrong key, damaged, newer format): a fault of the input, not of the
// cluster or the destination.
func IsRefusal(err error) bool {
	var k *KeyError
	var c *CorruptError
	var f *FormatError
	return errors.As(err, &k) || errors.As(err, &c) || errors.As(err, &f)
}
