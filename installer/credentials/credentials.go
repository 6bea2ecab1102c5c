// Package credentials says which Secrets the installer generates for an
// installation (database admins, one database user per service, the
// platform's signing and encryption keys, the self-signed TLS pair) and how
// each value is made. Values are generated once, on first install, and kept
// in the cluster forever; they never appear in rendered output.
package credentials

import (
	"sort"
	"strings"
)

// Kind is how a key's value is produced.
type Kind string

const (
	// Password is 32 random characters from [A-Za-z0-9].
	Password Kind = "password"
	// RandomKey is 32 random bytes, base64 encoded.
	RandomKey Kind = "random-key"
	// Fixed is a value known in advance (a user or database name).
	Fixed Kind = "fixed"
	// TLSPair is a CA, and a certificate for the domain signed by it; it
	// fills tls.crt, tls.key and ca.crt together.
	TLSPair Kind = "tls"
)

// Key is one key of a generated Secret.
type Key struct {
	Name  string `json:"name"`
	Kind  Kind   `json:"kind"`
	Value string `json:"value,omitempty"` // only for Fixed
}

// Secret is one generated Secret.
type Secret struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Purpose string `json:"purpose"`
	Keys    []Key  `json:"keys"`
}

// Names of the Secrets shared by the platform (see charts/README.md).
const (
	MongoDBAdmin = "onprem-mongodb-admin"
	// MongoDBKeyFile is the key a highly available MongoDB's members
	// authenticate each other with (mongod --keyFile).
	MongoDBKeyFile  = "onprem-mongodb-keyfile"
	PostgreSQLAdmin = "onprem-postgresql-admin"
	// PostgreSQLReplication is the role a highly available PostgreSQL's
	// replicas stream from the primary with.
	PostgreSQLReplication = "onprem-postgresql-replication"
	// PostgreSQLRewind is the role a highly available PostgreSQL's former
	// primary checks the new one with and rewinds from (pg_rewind) to
	// rejoin after a failover. It is not the admin, whose rotation would
	// otherwise leave every member that has not restarted since with a
	// password the primary refuses.
	PostgreSQLRewind = "onprem-postgresql-rewind"
	Redis            = "onprem-redis"
	RabbitMQ         = "onprem-rabbitmq"
	PlatformKeys     = "onprem-platform-keys"
	TLS              = "onprem-tls"
)

// ServiceSecret is the name of a service's own credentials for engine
// (mongodb or postgresql).
func ServiceSecret(service, engine string) string {
	return "onprem-" + service + "-" + engine
}

// DatabaseName is a service's database and user name: the service name with
// dashes turned into underscores, valid unquoted in both MongoDB and
// PostgreSQL.
func DatabaseName(service string) string {
	return strings.ReplaceAll(service, "-", "_")
}

// Needs describes an installation for Plan.
type Needs struct {
	// Internal lists the infrastructure services run in the cluster
	// (mongodb, postgresql, redis, rabbitmq); external ones bring their own
	// Secret.
	Internal map[string]bool
	// MongoDBUsers and PostgreSQLUsers list the services with their own
	// database on that engine.
	MongoDBUsers    []string
	PostgreSQLUsers []string
	// PostgreSQLReplication is set when PostgreSQL runs replicated
	// (spec.availability high).
	PostgreSQLReplication bool
	// MongoDBReplicaSet is set when MongoDB runs as a replica set
	// (spec.availability high).
	MongoDBReplicaSet bool
	// PlatformKeys is set when any service uses the signing/encryption keys.
	PlatformKeys bool
	// SelfSignedTLS is set when onprem makes the domain's certificate.
	SelfSignedTLS bool
}

// Plan lists the Secrets to generate, sorted by name.
func Plan(n Needs) []Secret {
	var out []Secret
	if n.Internal["mongodb"] {
		out = append(out, Secret{Name: MongoDBAdmin, Type: "Opaque", Purpose: "MongoDB root user",
			Keys: []Key{{Name: "username", Kind: Fixed, Value: "root"}, {Name: "password", Kind: Password}}})
	}
	if n.Internal["mongodb"] && n.MongoDBReplicaSet {
		out = append(out, Secret{Name: MongoDBKeyFile, Type: "Opaque", Purpose: "MongoDB replica set members' shared key (high availability)",
			Keys: []Key{{Name: "keyfile", Kind: RandomKey}}})
	}
	if n.Internal["postgresql"] {
		out = append(out, Secret{Name: PostgreSQLAdmin, Type: "Opaque", Purpose: "PostgreSQL superuser",
			Keys: []Key{{Name: "username", Kind: Fixed, Value: "postgres"}, {Name: "password", Kind: Password}}})
	}
	if n.Internal["postgresql"] && n.PostgreSQLReplication {
		out = append(out, Secret{Name: PostgreSQLReplication, Type: "Opaque", Purpose: "PostgreSQL replication role (high availability)",
			Keys: []Key{{Name: "username", Kind: Fixed, Value: "standby"}, {Name: "password", Kind: Password}}})
		out = append(out, Secret{Name: PostgreSQLRewind, Type: "Opaque", Purpose: "PostgreSQL rewind role: how a former primary rejoins (high availability)",
			Keys: []Key{{Name: "username", Kind: Fixed, Value: "rewind"}, {Name: "password", Kind: Password}}})
	}
	if n.Internal["redis"] {
		out = append(out, Secret{Name: Redis, Type: "Opaque", Purpose: "Redis password",
			Keys: []Key{{Name: "password", Kind: Password}}})
	}
	if n.Internal["rabbitmq"] {
		out = append(out, Secret{Name: RabbitMQ, Type: "Opaque", Purpose: "RabbitMQ user and Erlang cookie",
			Keys: []Key{{Name: "username", Kind: Fixed, Value: "onprem"}, {Name: "password", Kind: Password}, {Name: "erlang-cookie", Kind: Password}}})
	}
	for _, engine := range []struct {
		name  string
		users []string
	}{{"mongodb", n.MongoDBUsers}, {"postgresql", n.PostgreSQLUsers}} {
		for _, svc := range engine.users {
			db := DatabaseName(svc)
			out = append(out, Secret{Name: ServiceSecret(svc, engine.name), Type: "Opaque",
				Purpose: svc + "'s own " + engine.name + " database and user",
				Keys:    []Key{{Name: "username", Kind: Fixed, Value: db}, {Name: "password", Kind: Password}, {Name: "database", Kind: Fixed, Value: db}}})
		}
	}
	if n.PlatformKeys {
		out = append(out, Secret{Name: PlatformKeys, Type: "Opaque", Purpose: "token signing and data encryption keys",
			Keys: []Key{{Name: "signing-key", Kind: RandomKey}, {Name: "encryption-key", Kind: RandomKey}}})
	}
	if n.SelfSignedTLS {
		out = append(out, Secret{Name: TLS, Type: "kubernetes.io/tls", Purpose: "self-signed CA and certificate for the domain",
			Keys: []Key{{Name: "tls.crt", Kind: TLSPair}, {Name: "tls.key", Kind: TLSPair}, {Name: "ca.crt", Kind: TLSPair}}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// KeyNames lists the Secret's data keys.
func (s Secret) KeyNames() []string {
	out := make([]string, 0, len(s.Keys))
	for _, k := range s.Keys {
		out = append(out, k.Name)
	}
	return out
}
