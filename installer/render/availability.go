package render

import (
	"fmt"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sizing"
)

// MinHAReplicas is the fewest replicas a stateless component runs with
// spec.availability high: one node can be lost, or drained, while another
// replica serves.
const MinHAReplicas = 2

// PostgreSQLHAImage is the release image that runs PostgreSQL with
// Patroni: the postgresql component's images.postgresqlHA.
const PostgreSQLHAImage = "postgresql-ha"

// RedisHAImage is the release image that runs Redis with Sentinel (and
// the keeper's curl): the redis component's images.redisHA.
const RedisHAImage = "redis-ha"

// MongoDBReplicaSet is the name of the replica set that MongoDB runs as
// with spec.availability high: the mongodb chart's --replSet, and the
// services' MONGODB_REPLICA_SET.
const MongoDBReplicaSet = "onprem"

// AvailabilityError is a configuration that spec.availability high cannot
// honour: a component given fewer replicas than high availability needs,
// or a release without the images it needs.
type AvailabilityError struct{ Msg string }

func (e *AvailabilityError) Error() string { return e.Msg }

// stateless reports whether a component is one of the replicated stateless
// ones: the platform's services and the ingress controller.
func stateless(c release.Component) bool {
	return c.Chart == sizing.ServiceChart || c.Group == release.GroupIngress
}

// availabilityValues is spec.availability's layer over the sizing profile:
// with high, every stateless component runs at least MinHAReplicas
// (profiles that give more keep theirs). below is the layers under it.
func availabilityValues(in *config.Installation, c release.Component, below map[string]any) map[string]any {
	if in.Spec.Availability != config.AvailabilityHigh || !stateless(c) {
		return nil
	}
	if r, ok := intValue(below["replicas"]); ok && r >= MinHAReplicas {
		return nil
	}
	return map[string]any{"replicas": MinHAReplicas}
}

// checkAvailability refuses what the operator's own values or --set make
// of a component that high availability cannot stand behind.
func checkAvailability(in *config.Installation, rel *release.Release, c release.Component, values map[string]any) error {
	if in.Spec.Availability != config.AvailabilityHigh {
		return nil
	}
	if stateless(c) {
		if r, ok := intValue(values["replicas"]); ok && r == 1 {
			return &AvailabilityError{Msg: fmt.Sprintf(
				"component %s: replicas is 1 (from spec.components.%s.values or --set %s.replicas), but spec.availability is high, "+
					"which runs every stateless component on %d nodes or more: remove that value, set %d or more, or 0 to stop it",
				c.Name, c.Name, c.Name, MinHAReplicas, MinHAReplicas)}
		}
	}
	if need, ok := haImages[c.Name]; ok && c.Group == release.GroupInfrastructure {
		if _, ok := c.Images[need.key]; !ok {
			return &AvailabilityError{Msg: fmt.Sprintf(
				"spec.availability: high needs %s, and release %s's %s component names no %s image: "+
					"install a release that has one ('onprem versions'), use spec.databases.%s.mode external, or set spec.availability single",
				need.what, rel.Version, c.Name, need.image, c.Name)}
		}
	}
	return nil
}

// haImage is the image a database's chart runs with high availability:
// the component's images key and the release's image name.
type haImage struct{ key, image, what string }

// haImages: the databases whose replicated form runs an image of its own.
var haImages = map[string]haImage{
	"postgresql": {key: "postgresqlHA", image: PostgreSQLHAImage, what: "PostgreSQL with Patroni"},
	"redis":      {key: "redisHA", image: RedisHAImage, what: "Redis with Sentinel"},
}

// intValue reads a number from Helm values (YAML and --set give int,
// int64 or float64).
func intValue(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int64:
		return int(n), true
	case float64:
		if n == float64(int(n)) {
			return int(n), true
		}
	}
	return 0, false
}

// DefaultPostgreSQLMembers is the postgresql chart's ha.replicas.
const DefaultPostgreSQLMembers = 3

// DefaultRabbitMQMembers is the rabbitmq chart's ha.replicas.
const DefaultRabbitMQMembers = 3

// DefaultRedisMembers is the redis chart's ha.replicas.
const DefaultRedisMembers = 3

// DefaultMongoDBMembers is the mongodb chart's ha.replicas.
const DefaultMongoDBMembers = 3

// replicatedMembers is, for each database that spec.availability high
// replicates, the members its chart runs by default.
var replicatedMembers = map[string]int{
	"mongodb":    DefaultMongoDBMembers,
	"postgresql": DefaultPostgreSQLMembers,
	"rabbitmq":   DefaultRabbitMQMembers,
	"redis":      DefaultRedisMembers,
}

// databaseMembers is how many pods database db runs: the members of a
// replicated one, else 1.
func databaseMembers(in *config.Installation, db string, values map[string]any) int {
	def, ok := replicatedMembers[db]
	if !ok || in.Spec.Availability != config.AvailabilityHigh {
		return 1
	}
	if ha, ok := values["ha"].(map[string]any); ok {
		if n, ok := intValue(ha["replicas"]); ok && n > 0 {
			return n
		}
	}
	return def
}
