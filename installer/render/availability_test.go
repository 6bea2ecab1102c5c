package render

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/release"
)

// spec.availability high: every stateless component on two nodes or more
// with a disruption budget, PostgreSQL as a Patroni cluster, and the
// replication role's Secret in the plan.
func TestHighAvailability(t *testing.T) {
	res := mustRender(t, "high-availability")
	stateless := 0
	for _, c := range res.Components {
		for _, o := range c.Objects {
			if o.GetKind() != "Deployment" {
				continue
			}
			stateless++
			r, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
			if r < MinHAReplicas {
				t.Errorf("Deployment/%s: %d replicas, want %d or more", o.GetName(), r, MinHAReplicas)
			}
			find(t, c, "PodDisruptionBudget", o.GetName())
			spread, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "topologySpreadConstraints")
			anti, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
			if len(spread) == 0 && len(anti) == 0 {
				t.Errorf("Deployment/%s: replicas not spread over nodes", o.GetName())
			}
		}
	}
	if stateless < 10 {
		t.Fatalf("only %d Deployments rendered", stateless)
	}

	pg := res.Component("postgresql")
	sts := find(t, pg, "StatefulSet", "postgresql")
	if r, _, _ := unstructured.NestedInt64(sts.Object, "spec", "replicas"); r != 3 {
		t.Errorf("postgresql: %d members, want 3", r)
	}
	ctrs, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
	if img, _, _ := unstructured.NestedString(ctrs[0].(map[string]any), "image"); img != "registry.internal:5000/onprem/codefresh/postgresql-ha:2.8.0" {
		t.Errorf("postgresql image = %s, want the release's postgresql-ha relocated", img)
	}
	for _, kind := range []string{"ConfigMap/postgresql-patroni", "Role/postgresql-patroni", "RoleBinding/postgresql-patroni",
		"ServiceAccount/postgresql", "PodDisruptionBudget/postgresql", "NetworkPolicy/postgresql-peers", "Service/postgresql-replicas"} {
		k, n, _ := strings.Cut(kind, "/")
		find(t, pg, k, n)
	}
	svc := find(t, pg, "Service", "postgresql")
	if sel, found, _ := unstructured.NestedMap(svc.Object, "spec", "selector"); found {
		t.Errorf("Service postgresql selects %v: Patroni's Endpoints must be its only ones", sel)
	}
	for _, name := range []string{credentials.PostgreSQLReplication, credentials.PostgreSQLRewind} {
		if !slices.ContainsFunc(res.Secrets, func(s credentials.Secret) bool { return s.Name == name }) {
			t.Errorf("the plan has no %s Secret", name)
		}
	}

	// RabbitMQ: three nodes of one cluster, its peer discovery's access,
	// and the backup may read any of them.
	mq := res.Component("rabbitmq")
	msts := find(t, mq, "StatefulSet", "rabbitmq")
	if r, _, _ := unstructured.NestedInt64(msts.Object, "spec", "replicas"); r != 3 {
		t.Errorf("rabbitmq: %d nodes, want 3", r)
	}
	for _, kind := range []string{"Role/rabbitmq-peer-discovery", "RoleBinding/rabbitmq-peer-discovery",
		"ServiceAccount/rabbitmq", "PodDisruptionBudget/rabbitmq", "NetworkPolicy/rabbitmq-peers"} {
		k, n, _ := strings.Cut(kind, "/")
		find(t, mq, k, n)
	}
	// MongoDB: a replica set of three members named as the services are
	// told, the Job that initiates it, and the members' shared key.
	mg := res.Component("mongodb")
	gsts := find(t, mg, "StatefulSet", "mongodb")
	if r, _, _ := unstructured.NestedInt64(gsts.Object, "spec", "replicas"); r != 3 {
		t.Errorf("mongodb: %d members, want 3", r)
	}
	gargs, _, _ := unstructured.NestedSlice(gsts.Object, "spec", "template", "spec", "containers")
	if args, _, _ := unstructured.NestedStringSlice(gargs[0].(map[string]any), "args"); !strings.Contains(strings.Join(args, " "), "--replSet "+MongoDBReplicaSet) {
		t.Errorf("mongod args %v: not a member of replica set %s", args, MongoDBReplicaSet)
	}
	jobs := 0
	for _, o := range mg.Objects {
		if o.GetKind() == "Job" && strings.HasPrefix(o.GetName(), "mongodb-replica-set-") {
			jobs++
		}
	}
	if jobs != 1 {
		t.Errorf("mongodb: %d replica set Jobs, want 1", jobs)
	}
	if !slices.ContainsFunc(res.Secrets, func(s credentials.Secret) bool { return s.Name == credentials.MongoDBKeyFile }) {
		t.Errorf("the plan has no %s Secret", credentials.MongoDBKeyFile)
	}
	clients := 0
	for _, c := range res.Components {
		for _, o := range c.Objects {
			if o.GetKind() != "Deployment" || o.GetLabels()["onprem.dev/client-mongodb"] != "true" {
				continue
			}
			clients++
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			env, _, _ := unstructured.NestedSlice(cs[0].(map[string]any), "env")
			set := ""
			for _, e := range env {
				if e.(map[string]any)["name"] == "MONGODB_REPLICA_SET" {
					set, _ = e.(map[string]any)["value"].(string)
				}
			}
			if set != MongoDBReplicaSet {
				t.Errorf("Deployment/%s: MONGODB_REPLICA_SET %q, want %q", o.GetName(), set, MongoDBReplicaSet)
			}
		}
	}
	if clients == 0 {
		t.Errorf("no service uses MongoDB")
	}

	// The backup's exec rights follow the members of each replicated
	// database (the primary moves).
	ha := &config.Installation{Spec: config.Spec{Availability: config.AvailabilityHigh}}
	for db, want := range map[string]int{"postgresql": 3, "rabbitmq": 3, "redis": 3, "mongodb": 3, "consul": 1} {
		if got := databaseMembers(ha, db, nil); got != want {
			t.Errorf("databaseMembers(high, %s) = %d, want %d", db, got, want)
		}
	}
	if got := databaseMembers(ha, "rabbitmq", map[string]any{"ha": map[string]any{"replicas": 5}}); got != 5 {
		t.Errorf("databaseMembers(high, rabbitmq, ha.replicas 5) = %d", got)
	}
	if got := databaseMembers(&config.Installation{}, "rabbitmq", nil); got != 1 {
		t.Errorf("databaseMembers(single, rabbitmq) = %d", got)
	}

	// single renders none of it.
	single := mustRender(t, "minimal")
	if n := len(single.Component("postgresql").Objects); n != 2+1 {
		names := []string{}
		for _, o := range single.Component("postgresql").Objects {
			names = append(names, o.GetKind()+"/"+o.GetName())
		}
		t.Errorf("single postgresql renders %v", names)
	}
}

// What high availability cannot stand behind is refused, naming the field.
func TestHighAvailabilityRefusals(t *testing.T) {
	in, rel := load(t, "high-availability")
	_, err := Render(context.Background(), Options{Installation: in, Release: rel, Set: []string{"gitops-ui.replicas=1"}})
	var ae *AvailabilityError
	if !errors.As(err, &ae) || !IsInputError(err) || !strings.Contains(err.Error(), "component gitops-ui: replicas is 1") ||
		!strings.Contains(err.Error(), "spec.availability is high") {
		t.Errorf("--set gitops-ui.replicas=1: %v", err)
	}
	if _, err := Render(context.Background(), Options{Installation: in, Release: rel, Set: []string{"gitops-ui.replicas=0"}}); err != nil {
		t.Errorf("replicas 0 (stopped) refused: %v", err)
	}

	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	old, err := set.Get("2.7.1")
	if err != nil {
		t.Fatal(err)
	}
	in.Spec.Version = old.Version
	_, err = Render(context.Background(), Options{Installation: in, Release: old})
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "release 2.7.1's postgresql component names no postgresql-ha image") {
		t.Errorf("high on 2.7.1: %v", err)
	}
	in.Spec.Databases.PostgreSQL.Mode = config.DatabaseModeExternal
	in.Spec.Databases.PostgreSQL.External.SecretName = "pg"
	_, err = Render(context.Background(), Options{Installation: in, Release: old})
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "needs Redis with Sentinel, and release 2.7.1's redis component names no redis-ha image") ||
		!strings.Contains(err.Error(), "spec.databases.redis.mode external") {
		t.Errorf("high on 2.7.1 with an external PostgreSQL: %v, want Redis's image refused", err)
	}
	in.Spec.Databases.Redis.Mode = config.DatabaseModeExternal
	in.Spec.Databases.Redis.External.SecretName = "redis"
	if _, err := Render(context.Background(), Options{Installation: in, Release: old}); err != nil {
		t.Errorf("high on 2.7.1 with an external PostgreSQL and Redis: %v", err)
	}
}
