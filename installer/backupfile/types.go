package backupfile

import (
	"fmt"
	"strings"
	"time"
)

// FormatVersion is the version of the format this onprem writes and the
// newest it reads.
const FormatVersion = 1

// Extension ends the name of every backup file.
const Extension = ".onprem-backup"

// PartSize is the largest part of a streamed entry. A part is held in
// memory while it is written, so this bounds the writer's memory.
const PartSize = 4 << 20

// Names of the fixed entries.
const (
	HeaderName   = "backup.json"
	ManifestName = "manifest.json"
)

// Kinds of entries.
const (
	KindConfig        = "config"        // the effective onprem.yaml
	KindState         = "state"         // the installation's record
	KindSecrets       = "secrets"       // the generated Secrets
	KindRegistrations = "registrations" // runners, runtimes, Git sources, managed clusters
	KindDatabase      = "database"      // a logical dump of one database
	KindDefinitions   = "definitions"   // RabbitMQ's definitions
	KindCache         = "cache"         // Redis's data (optional)
)

// Triggers: what made a backup.
const (
	TriggerManual   = "manual"
	TriggerSchedule = "schedule"
	TriggerUpgrade  = "upgrade"
)

// Header describes a backup; it is the first entry of the file.
type Header struct {
	// Format is the version of this format the file was written with.
	Format int `json:"format"`
	// Installation and Namespace name the platform backed up.
	Installation string `json:"installation"`
	Namespace    string `json:"namespace"`
	// Version is the platform version that was installed.
	Version string `json:"version"`
	// Installer is the onprem version that wrote the backup.
	Installer string    `json:"installer"`
	Created   time.Time `json:"created"`
	Host      string    `json:"host,omitempty"`
	// Trigger says what made it: manual, schedule or upgrade.
	Trigger string `json:"trigger"`
	// Components are the platform's components (Helm releases) at the
	// time of the backup.
	Components []string `json:"components"`
}

// Entry is one file of a backup.
type Entry struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Engine and Database name a dumped database (KindDatabase), or the
	// engine of definitions and cache entries.
	Engine   string `json:"engine,omitempty"`
	Database string `json:"database,omitempty"`
	// Service is the platform service that owns the database.
	Service string `json:"service,omitempty"`
	// Size is the entry's size in bytes; Parts how many parts a streamed
	// entry was cut into (0: written in one piece).
	Size   int64  `json:"size"`
	Parts  int    `json:"parts,omitempty"`
	SHA256 string `json:"sha256"`
}

// Manifest is the last entry of a backup: its header, and every other entry
// with its size and checksum, in file order.
type Manifest struct {
	Header
	Entries  []Entry   `json:"entries"`
	Finished time.Time `json:"finished"`
}

// Entry returns the named entry, or nil.
func (m *Manifest) Entry(name string) *Entry {
	for i := range m.Entries {
		if m.Entries[i].Name == name {
			return &m.Entries[i]
		}
	}
	return nil
}

// Databases returns the database entries, in file order.
func (m *Manifest) Databases() []Entry {
	var out []Entry
	for _, e := range m.Entries {
		if e.Kind == KindDatabase {
			out = append(out, e)
		}
	}
	return out
}

// Size is the sum of the entries' sizes.
func (m *Manifest) Size() int64 {
	var n int64
	for _, e := range m.Entries {
		n += e.Size
	}
	return n
}

// partName is the tar name of part i of a streamed entry.
func partName(name string, i int) string { return fmt.Sprintf("%s.part-%06d", name, i) }

// splitPart returns the entry name and part number of a part's tar name.
func splitPart(tarName string) (string, int, bool) {
	i := strings.LastIndex(tarName, ".part-")
	if i < 0 {
		return "", 0, false
	}
	var n int
	if _, err := fmt.Sscanf(tarName[i+len(".part-"):], "%06d", &n); err != nil || len(tarName)-i-len(".part-") != 6 {
		return "", 0, false
	}
	return tarName[:i], n, true
}

// validName reports whether an entry name is acceptable: relative, clean,
// no "..", not one of the fixed names, not looking like a part.
func validName(name string) error {
	switch {
	case name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "\\"):
		return fmt.Errorf("entry name %q: must be a relative path", name)
	case name == HeaderName || name == ManifestName:
		return fmt.Errorf("entry name %q is reserved", name)
	}
	for _, p := range strings.Split(name, "/") {
		if p == "" || p == "." || p == ".." {
			return fmt.Errorf("entry name %q: must be a clean relative path", name)
		}
	}
	if _, _, ok := splitPart(name); ok {
		return fmt.Errorf("entry name %q: must not end like a part (.part-NNNNNN)", name)
	}
	return nil
}
