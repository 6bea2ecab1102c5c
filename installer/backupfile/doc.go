// Package backupfile is the format of an onprem backup: one file, encrypted
// as a whole with age (filippo.io/age) to the operator's recipients or a
// passphrase, holding a POSIX tar stream.
//
// # Inside the encryption
//
//	backup.json              the Header, first, so that a reader refuses a
//	                         newer format before it reads anything else
//	<name>                   a small entry written in one piece (the
//	                         configuration, the state, the Secrets, ...)
//	<name>.part-000000 ...   a streamed entry (a database dump), cut into
//	                         parts of at most PartSize bytes, in order
//	manifest.json            the Manifest, last: every entry with its size,
//	                         its parts and the SHA-256 of its whole content
//
// A decrypted backup is a plain tar that the operator can read with
// standard tools: `age -d -i backup.key FILE | tar -x`, then
// `cat NAME.part-* > NAME` for a streamed entry.
//
// # Integrity
//
// age authenticates every 64 KiB chunk and marks the last one, so a flipped
// byte, a truncated file or a file encrypted to another key is refused by
// the decryption itself; the manifest's SHA-256 of every entry is checked
// again as it is read. Read refuses a backup whose Header.Format is newer
// than FormatVersion before it reads any entry.
package backupfile
