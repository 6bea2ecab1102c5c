package bundle

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"sort"
)

// checksumLine is one line of the checksums file, in sha256sum's format,
// so that an extracted bundle checks with `sha256sum -c checksums`.
var checksumLine = regexp.MustCompile(`^([0-9a-f]{64})  (.+)$`)

// encodeChecksums renders path -> hex digest as the checksums file,
// sorted by path.
func encodeChecksums(sums map[string]string) []byte {
	paths := make([]string, 0, len(sums))
	for p := range sums {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b bytes.Buffer
	for _, p := range paths {
		fmt.Fprintf(&b, "%s  %s\n", sums[p], p)
	}
	return b.Bytes()
}

// parseChecksums reads the checksums file strictly: every line a digest
// and a valid bundle path, no path twice.
func parseChecksums(data []byte) (map[string]string, error) {
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		m := checksumLine.FindStringSubmatch(sc.Text())
		if m == nil {
			return nil, fmt.Errorf("%s:%d: not \"<sha256>  <path>\"", checksumsFile, n)
		}
		p := m[2]
		if !validEntryName(p) || p == checksumsFile || p == signatureFile {
			return nil, fmt.Errorf("%s:%d: %q is not a bundle file", checksumsFile, n, p)
		}
		if _, dup := sums[p]; dup {
			return nil, fmt.Errorf("%s:%d: %s is listed twice", checksumsFile, n, p)
		}
		sums[p] = m[1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", checksumsFile, err)
	}
	return sums, nil
}
