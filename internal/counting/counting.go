// Package counting counts the bytes that pass through a reader or a
// writer: a backup's size as it is uploaded, the bytes a restore read, the
// offset of a bundle's data.
package counting

import "io"

// Writer counts the bytes written through it to W.
type Writer struct {
	W io.Writer
	N int64
}

func (c *Writer) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}

// Reader counts the bytes read through it from R.
type Reader struct {
	R io.Reader
	N int64
}

func (c *Reader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}
