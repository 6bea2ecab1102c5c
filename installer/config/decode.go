package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Decode reads onprem.yaml strictly. filename is only used in messages.
//
// The YAML is walked alongside the Installation type: an unknown or misspelt
// key, a wrong kind of value (a list where a mapping is expected, a string
// where a boolean is expected), a duplicate key, and an apiVersion or kind
// that is not an Installation's are all reported at once, as Errors naming
// file:line and the field path. The result is neither defaulted nor
// validated; Load does both.
//
// The returned Source records the line of every field path in the file.
func Decode(filename string, data []byte) (*Installation, *Source, error) {
	in, src, errs := decodeLenient(filename, data)
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return in, src, nil
}

// decodeLenient decodes what it can: fields with problems are left out of
// the Installation and reported in errs, so that Load can go on and
// validate the rest of the file, reporting every problem at once. The
// Installation is nil only when the document itself cannot be read.
func decodeLenient(filename string, data []byte) (*Installation, *Source, Errors) {
	if len(data) > MaxFileSize {
		return nil, nil, Errors{tooLarge(filename)}
	}
	src := NewSource(filename)
	c := newCollector(src)

	root, problem := parseSingleDocument(data)
	if problem != nil {
		problem.File = filename
		return nil, nil, Errors{*problem}
	}

	w := &walker{src: src, errs: c, budget: maxNodes}
	tree, _ := w.value(root, installationType, "")
	checkIdentity(root, c)
	var errs Errors
	if err := c.err(); err != nil {
		errs = err.(Errors)
	}

	in, err := fromTree(tree)
	if err != nil {
		// The walk left only what it accepted, so this is a bug in the
		// walker; still report it as a configuration problem rather than
		// fail obscurely.
		return nil, nil, append(errs, FieldError{File: filename, Message: "cannot decode the configuration: " + err.Error()})
	}
	return in, src, errs
}

// MaxFileSize is the largest onprem.yaml onprem reads: far more than any
// installation needs (the starter file is under 10 KiB), and small enough
// that a wrong file (an image, a log, a database dump) is refused before
// it costs memory and time.
const MaxFileSize = 4 << 20

func tooLarge(filename string) FieldError {
	return FieldError{File: filename, Message: fmt.Sprintf("is larger than %d MiB, more than any configuration: is it the right file? ('onprem config init' writes a starter file)", MaxFileSize>>20)}
}

// fromTree turns the JSON-compatible tree built by the walker into an
// Installation, refusing anything the type does not know.
func fromTree(tree any) (*Installation, error) {
	data, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("encoding the decoded document: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	in := new(Installation)
	if err := dec.Decode(in); err != nil {
		return nil, fmt.Errorf("decoding the document into an Installation: %w", err)
	}
	return in, nil
}

// yamlLine finds the line in a go-yaml error message.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseSingleDocument parses data as YAML and returns the root node of its
// only non-empty document, or the problem (without the file name).
func parseSingleDocument(data []byte) (root *yaml.Node, problem *FieldError) {
	defer func() {
		// go-yaml converts its own panics into errors, but a configuration
		// file is operator input and must never crash the installer.
		if r := recover(); r != nil {
			root, problem = nil, &FieldError{Message: fmt.Sprintf("invalid YAML: %v", r)}
		}
	}()

	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, yamlError(err)
		}
		if isEmptyDocument(&doc) {
			continue
		}
		docs = append(docs, &doc)
	}

	switch {
	case len(docs) == 0:
		return nil, &FieldError{Line: 1, Message: fmt.Sprintf("the file is empty: expected an Installation (apiVersion: %s, kind: %s, spec: ...); 'onprem config init' writes a starter file", APIVersion, Kind)}
	case len(docs) > 1:
		return nil, &FieldError{Line: docs[1].Line, Message: "a second YAML document starts here: onprem.yaml must hold exactly one Installation document; remove the '---' separator and what follows, or move it to its own file"}
	}
	content := docs[0].Content[0]
	if resolved := resolveAlias(content); resolved == nil || resolved.Kind != yaml.MappingNode {
		return nil, &FieldError{Line: content.Line, Message: fmt.Sprintf("the document is %s: expected a mapping with apiVersion, kind, metadata and spec", describe(content))}
	}
	return content, nil
}

// yamlError turns a go-yaml syntax error into a FieldError with its line.
func yamlError(err error) *FieldError {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, convErr := strconv.Atoi(m[1])
		if convErr == nil {
			return &FieldError{Line: line, Message: "invalid YAML: " + m[2]}
		}
	}
	const prefix = "yaml: "
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		msg = msg[len(prefix):]
	}
	return &FieldError{Message: "invalid YAML: " + msg}
}

// isEmptyDocument reports whether a document holds nothing but comments (a
// stray '---' at the end of a file, for example).
func isEmptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	c := doc.Content[0]
	return len(doc.Content) == 1 && c.Kind == yaml.ScalarNode && c.ShortTag() == tagNull && c.Value == "" && c.Anchor == "" && c.Style == 0
}

// checkIdentity reports an apiVersion or kind that is not an Installation's,
// so that feeding the installer some other YAML file says so plainly.
func checkIdentity(root *yaml.Node, c *collector) {
	root = resolveAlias(root)
	if root == nil || root.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolveAlias(root.Content[i+1])
		if v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
			continue
		}
		switch k.Value {
		case "apiVersion":
			if v.Value != APIVersion {
				c.addAt(v.Line, "apiVersion", "", "%q is not valid (valid: %s)", v.Value, APIVersion)
			}
		case "kind":
			if v.Value != Kind {
				c.addAt(v.Line, "kind", "", "%q is not valid (valid: %s)", v.Value, Kind)
			}
		}
	}
}
