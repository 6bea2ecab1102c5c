package snapshot

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/topology"
	"onprem.dev/onprem/preflight"
)

// File names of a snapshot written out (Files).
const (
	FileMeta         = "meta.json"
	FileConfig       = "config/onprem.yaml"
	FileState        = "state.json"
	FileReleases     = "helm/releases.json"
	FileCertificates = "certificates.json"
	FileHealth       = "health.json"
	FilePreflight    = "preflight.json"
	FileAttachments  = "attachments.json"
	FileDrift        = "drift.json"
	FileMongoDB      = "mongodb-replica-set.json"
	FileLogIndex     = "logs/index.json"
	FileClusterDNS   = "cluster/dns-pods.json"
	dirCluster       = "cluster/"
	dirNamespaces    = "namespaces/"
	dirLogs          = "logs/"
)

// File is one file of a written snapshot.
type File struct {
	Path string
	Data []byte
	// Describe says what the file holds (the bundle's index.json).
	Describe string
}

// Files writes the snapshot as files, in a stable order.
func (s *Snapshot) Files() ([]File, error) {
	var out []File
	var err error
	add := func(p, describe string, v any) {
		if err != nil {
			return
		}
		var b []byte
		if b, err = json.MarshalIndent(v, "", "  "); err != nil {
			err = fmt.Errorf("writing %s: %w", p, err)
			return
		}
		out = append(out, File{Path: p, Data: append(b, '\n'), Describe: describe})
	}
	add(FileMeta, "what was collected, when, from which cluster, and how each collector went (what it skipped and why)", s.Meta)
	if s.Config != nil {
		out = append(out, File{Path: FileConfig, Data: s.Config, Describe: "the effective configuration of the last install or upgrade (redacted)"})
	}
	if s.State != nil {
		add(FileState, "the installation's state record and its history of operations", s.State)
	}
	add(FileReleases, "every Helm release of the collected namespaces with its history (values redacted)", s.Releases)
	add(dirCluster+"nodes.json", "the nodes: conditions, capacity, allocatable", s.Cluster.Nodes)
	add(dirCluster+"allocated.json", "per node, the requests of the pods running there", s.Cluster.Allocated)
	add(dirCluster+"storageclasses.json", "the StorageClasses", s.Cluster.StorageClasses)
	add(dirCluster+"persistentvolumes.json", "the PersistentVolumes and what they are bound to", s.Cluster.PersistentVolumes)
	add(dirCluster+"ingressclasses.json", "the IngressClasses", s.Cluster.IngressClasses)
	if s.Cluster.DNS != nil {
		add(FileClusterDNS, "the cluster's DNS pods ("+preflight.DNSSelector+" in "+preflight.DNSNamespace+"): their nodes, readiness and restarts", s.Cluster.DNS)
	}
	nss := make([]string, 0, len(s.Namespaces))
	for ns := range s.Namespaces {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		o := s.Namespaces[ns]
		b, merr := json.Marshal(o)
		if merr != nil {
			return nil, merr
		}
		var kinds map[string]json.RawMessage
		if merr := json.Unmarshal(b, &kinds); merr != nil {
			return nil, merr
		}
		names := make([]string, 0, len(kinds))
		for k := range kinds {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			describe := "the " + k + " of namespace " + ns
			if k == "secrets" {
				describe = "the Secrets of namespace " + ns + ": names, types and keys only, never a value"
			}
			add(dirNamespaces+ns+"/"+k+".json", describe, kinds[k])
		}
	}
	add(FileCertificates, "the certificates found in the Secrets: subject, issuer, names, validity (no key)", s.Certificates)
	add(FileHealth, "each platform service's readiness answer: whether its databases and queues answer it", s.Health)
	if s.Preflight != nil {
		add(FilePreflight, "the preflight checks run at collection time, with their remediations", s.Preflight)
	}
	if s.Attachments != nil {
		add(FileAttachments, "runners, runtimes, Git sources and managed clusters with their health (no token)", s.Attachments)
	}
	if s.Drift != nil {
		add(FileDrift, "per component, the live objects that differ from its deployed release in fields onprem sets (no value)", s.Drift)
	}
	if s.MongoDB != nil {
		add(FileMongoDB, "MongoDB's replica set as one member saw it (replSetGetStatus: each member's state, health and last operation's time), and why members did not answer", s.MongoDB)
	}
	add(FileLogIndex, "the containers whose logs were collected, and why a log is missing", s.Logs)
	for _, l := range s.Logs {
		if l.Error == "" {
			out = append(out, File{Path: LogPath(l), Data: []byte(l.Text), Describe: logDescribe(l)})
		}
	}
	return out, err
}

// LogPath is where a container's log is written.
func LogPath(l Log) string {
	name := l.Container + ".log"
	if l.Previous {
		name = l.Container + ".previous.log"
	}
	return dirLogs + path.Join(l.Namespace, l.Pod, name)
}

func logDescribe(l Log) string {
	if l.Previous {
		return fmt.Sprintf("the log of the previous run of container %s of pod %s/%s (tail)", l.Container, l.Namespace, l.Pod)
	}
	return fmt.Sprintf("the log of container %s of pod %s/%s (tail)", l.Container, l.Namespace, l.Pod)
}

// FromFiles reads back a snapshot written by Files (files by path). Files
// it does not know are ignored; a file it knows that does not parse is an
// error naming it.
func FromFiles(files map[string][]byte) (*Snapshot, error) {
	s := &Snapshot{Namespaces: map[string]*Objects{}}
	read := func(p string, v any) error {
		b, ok := files[p]
		if !ok {
			return nil
		}
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	}
	if _, ok := files[FileMeta]; !ok {
		return nil, fmt.Errorf("%s is missing: this is not a support bundle written by onprem", FileMeta)
	}
	if err := read(FileMeta, &s.Meta); err != nil {
		return nil, err
	}
	s.Config = files[FileConfig]
	if _, ok := files[FileState]; ok {
		s.State = &state.State{}
		if err := read(FileState, s.State); err != nil {
			return nil, err
		}
	}
	if _, ok := files[FilePreflight]; ok {
		s.Preflight = &preflight.Report{}
		if err := read(FilePreflight, s.Preflight); err != nil {
			return nil, err
		}
	}
	if _, ok := files[FileAttachments]; ok {
		s.Attachments = &Attachments{}
		if err := read(FileAttachments, s.Attachments); err != nil {
			return nil, err
		}
	}
	if _, ok := files[FileMongoDB]; ok {
		s.MongoDB = &topology.MongoDBAnswer{}
		if err := read(FileMongoDB, s.MongoDB); err != nil {
			return nil, err
		}
	}
	for p, v := range map[string]any{FileReleases: &s.Releases, dirCluster + "nodes.json": &s.Cluster.Nodes,
		dirCluster + "allocated.json": &s.Cluster.Allocated, dirCluster + "storageclasses.json": &s.Cluster.StorageClasses,
		dirCluster + "persistentvolumes.json": &s.Cluster.PersistentVolumes, dirCluster + "ingressclasses.json": &s.Cluster.IngressClasses,
		FileClusterDNS:   &s.Cluster.DNS,
		FileCertificates: &s.Certificates, FileHealth: &s.Health, FileLogIndex: &s.Logs, FileDrift: &s.Drift} {
		if err := read(p, v); err != nil {
			return nil, err
		}
	}
	// The namespaces: one file per kind, put together again as one
	// Objects value.
	byNS := map[string]map[string]json.RawMessage{}
	for p, b := range files {
		rest, ok := strings.CutPrefix(p, dirNamespaces)
		if !ok {
			continue
		}
		ns, file, ok := strings.Cut(rest, "/")
		kind, isJSON := strings.CutSuffix(file, ".json")
		if !ok || !isJSON || strings.Contains(kind, "/") {
			continue
		}
		// Checked here, so that the error names the file: put together
		// below, a broken one would only say that some JSON is invalid.
		var raw json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if byNS[ns] == nil {
			byNS[ns] = map[string]json.RawMessage{}
		}
		byNS[ns][kind] = raw
	}
	for ns, kinds := range byNS {
		b, err := json.Marshal(kinds)
		if err != nil {
			return nil, err
		}
		o := &Objects{}
		if err := json.Unmarshal(b, o); err != nil {
			return nil, fmt.Errorf("%s%s: %w", dirNamespaces, ns, err)
		}
		s.Namespaces[ns] = o
	}
	for i := range s.Logs {
		s.Logs[i].Text = string(files[LogPath(s.Logs[i])])
	}
	return s, nil
}
