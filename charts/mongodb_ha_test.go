package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"onprem.dev/onprem/e2e/testservers"
)

// TestMongoDBHighAvailability: with global.availability high the mongodb
// chart runs a replica set of three members, one per node, sharing a key
// from a Secret, and a Job that initiates the set with the members'
// stable names; without it, one standalone server exactly as before.
func TestMongoDBHighAvailability(t *testing.T) {
	const ha = "global: {availability: high, databases: {mongodb: {replicaSet: onprem}}}"
	r := infraMustRender(t, "mongodb", valuesOf(t, ha))
	sts := infraStatefulSet(t, r)
	if *sts.Spec.Replicas != 3 || sts.Spec.Template.Labels["onprem.dev/mongodb-cluster"] != "mongodb" {
		t.Errorf("replicas %d, labels %v: want 3 members labelled as the set", *sts.Spec.Replicas, sts.Spec.Template.Labels)
	}
	infraCheckMembers(t, sts)
	pod := sts.Spec.Template.Spec
	c := infraContainer(t, r, "mongodb")
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--auth", "--replSet onprem", "--keyFile /etc/mongodb-keyfile/keyfile"} {
		if !strings.Contains(args, want) {
			t.Errorf("mongod args %q lack %q", args, want)
		}
	}
	// The key reaches mongod as a file only its user reads: an init
	// container copies it from the Secret into a memory volume.
	if len(pod.InitContainers) != 1 || !strings.Contains(strings.Join(pod.InitContainers[0].Command, " "), "chmod 0400 /etc/mongodb-keyfile/keyfile") {
		t.Fatalf("init containers %+v: want the key copied and made private", pod.InitContainers)
	}
	infraCheckRestricted(t, "init container keyfile", pod.InitContainers[0])
	var keySecret string
	for _, v := range pod.Volumes {
		if v.Name == "keyfile-secret" && v.Secret != nil {
			keySecret = v.Secret.SecretName
		}
		if v.Name == "keyfile" && (v.EmptyDir == nil || v.EmptyDir.Medium != "Memory") {
			t.Errorf("volume keyfile %+v: want a memory volume (the key never touches a disk)", v)
		}
	}
	if keySecret != "onprem-mongodb-keyfile" {
		t.Errorf("the key's Secret is %q, want onprem-mongodb-keyfile", keySecret)
	}

	// The Job initiates the set with the members' stable names and the
	// admin from the mounted Secret; it reaches them as a MongoDB client.
	if len(r.jobs) != 1 || len(r.configMaps) != 1 || len(r.pdbs) != 1 || len(r.networkPolicies) != 1 {
		t.Fatalf("%d Jobs, %d ConfigMaps, %d budgets, %d policies: want one of each", len(r.jobs), len(r.configMaps), len(r.pdbs), len(r.networkPolicies))
	}
	job := r.jobs[0]
	if !strings.HasPrefix(job.Name, "mongodb-replica-set-") {
		t.Errorf("Job %s", job.Name)
	}
	jc := job.Spec.Template.Spec.Containers[0]
	members, _ := infraEnvValue(jc, "MONGODB_MEMBERS")
	if want := strings.ReplaceAll("mongodb-0.mongodb-headless.NS.svc:27017,mongodb-1.mongodb-headless.NS.svc:27017,mongodb-2.mongodb-headless.NS.svc:27017", "NS", infraNamespace); members != want {
		t.Errorf("MONGODB_MEMBERS %q, want %q", members, want)
	}
	if set, _ := infraEnvValue(jc, "MONGODB_REPLICA_SET"); set != "onprem" {
		t.Errorf("MONGODB_REPLICA_SET %q", set)
	}
	if job.Spec.Template.Labels["onprem.dev/client-mongodb"] != "true" || job.Spec.Template.Labels["app.kubernetes.io/name"] == "mongodb" {
		t.Errorf("Job pod labels %v: a MongoDB client, never selected by the Service mongodb", job.Spec.Template.Labels)
	}
	infraCheckRestricted(t, "Job container", jc)
	script := r.configMaps[0].Data["replica-set.js"]
	for _, want := range []string{"replSetInitiate", "replSetReconfig", "directConnection=true", "replSetStepDown"} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	// The script is valid JavaScript (mongosh runs it on Node.js, which
	// the test installs from Debian when the machine lacks it).
	node := testservers.EnsurePackage(t, "nodejs", "node")
	f := filepath.Join(t.TempDir(), "replica-set.js")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(node, "--check", f).CombinedOutput(); err != nil {
		t.Errorf("node --check: %v: %s", err, out)
	}
	// The same members make the same Job; another member count another.
	five := infraMustRender(t, "mongodb", valuesOf(t, ha+"\nha: {replicas: 5}"))
	if again := infraMustRender(t, "mongodb", valuesOf(t, ha)); again.jobs[0].Name != job.Name {
		t.Errorf("the same values made Job %s, then %s", job.Name, again.jobs[0].Name)
	}
	if five.jobs[0].Name == job.Name {
		t.Errorf("5 members kept the Job of 3 (%s): the new members would never join", job.Name)
	}
	for _, p := range r.networkPolicies {
		if !slices.Contains([]string{"mongodb-peers"}, p.Name) {
			t.Errorf("policy %s", p.Name)
		}
	}

	// Fewer than three cannot keep a majority; the set needs a name.
	if _, err := infraRender(t, "mongodb", valuesOf(t, ha+"\nha: {replicas: 2}")); err == nil || !strings.Contains(err.Error(), "ha.replicas is 2") {
		t.Errorf("ha.replicas 2: %v, want a refusal naming ha.replicas", err)
	}
	if _, err := infraRender(t, "mongodb", valuesOf(t, "global: {availability: high}")); err == nil || !strings.Contains(err.Error(), "global.databases.mongodb.replicaSet is required") {
		t.Errorf("no replica set name: %v", err)
	}

	// Single: one server, none of the replica set's parts.
	s := infraMustRender(t, "mongodb", nil)
	one := infraStatefulSet(t, s)
	if *one.Spec.Replicas != 1 || len(one.Spec.Template.Spec.InitContainers) != 0 || len(s.jobs)+len(s.pdbs)+len(s.networkPolicies)+len(s.configMaps) != 0 ||
		strings.Contains(strings.Join(infraContainer(t, s, "mongodb").Args, " "), "--replSet") {
		t.Errorf("single: %d replicas, %d init containers, %d Jobs, %d budgets, %d policies", *one.Spec.Replicas, len(one.Spec.Template.Spec.InitContainers), len(s.jobs), len(s.pdbs), len(s.networkPolicies))
	}
}
