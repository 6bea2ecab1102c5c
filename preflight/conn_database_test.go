//go:build linux

package preflight

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"onprem.dev/onprem/e2e/testservers"
)

const externalDatabasesYAML = `apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: 2.8.0
  domain: ci.example.com
  databases:
    mongodb: {mode: external, external: {secretName: mongodb-conn}}
    redis: {mode: external, external: {secretName: redis-conn}}
    rabbitmq: {mode: external, external: {secretName: rabbitmq-conn}}
    postgresql: {mode: external, external: {secretName: postgresql-conn}}
`

// TestDatabaseChecks runs each external-database check against a real
// server of its kind on loopback, with the connection Secrets read from a
// real API server: pass, and every failure mode.
func TestDatabaseChecks(t *testing.T) {
	t.Parallel() // its own cluster
	env := connTestEnv(t, externalDatabasesYAML)
	// A TLS ClientHello leaves a plain Redis or MongoDB waiting for more:
	// the handshake bound ends it; a short one keeps the test short.
	defer func(d time.Duration) { dbHandshakeTimeout = d }(dbHandshakeTimeout)
	dbHandshakeTimeout = 3 * time.Second
	t0 := time.Now()
	servers := map[string]string{
		"redis":      testservers.Redis(t, "redis-s3cret"),
		"postgresql": testservers.PostgreSQL(t, "platform", "pg-s3cret"),
		"mongodb":    testservers.MongoDB(t, "platform", "mongo-s3cret"),
		"rabbitmq":   testservers.RabbitMQ(t, "platform", "rabbit-s3cret"),
	}
	t.Logf("servers started in %s", time.Since(t0).Round(100*time.Millisecond))
	users := map[string][2]string{
		"redis":      {"", "redis-s3cret"},
		"postgresql": {"platform", "pg-s3cret"},
		"mongodb":    {"platform", "mongo-s3cret"},
		"rabbitmq":   {"platform", "rabbit-s3cret"},
	}
	products := map[string]string{"redis": "Redis", "postgresql": "PostgreSQL", "mongodb": "MongoDB", "rabbitmq": "RabbitMQ"}
	checks := map[string]func(min string) Check{"redis": redisCheck, "postgresql": postgresqlCheck, "mongodb": mongodbCheck, "rabbitmq": rabbitmqCheck}
	mins := map[string]string{"redis": minRedis, "postgresql": minPostgreSQL, "mongodb": minMongoDB, "rabbitmq": minRabbitMQ}
	// Debian bookworm's RabbitMQ is 3.10.8, older than the platform's
	// minimum 3.11: the real check must fail on it (below); the other cases
	// use a check whose minimum is lowered to 3.10.
	passMin := map[string]string{"rabbitmq": "3.10"}

	for _, db := range []string{"redis", "postgresql", "mongodb", "rabbitmq"} {
		t.Run(db, func(t *testing.T) {
			addr := servers[db]
			host, port, _ := strings.Cut(addr, ":")
			secret := db + "-conn"
			ref := "onprem/" + secret
			min := mins[db]
			if m, ok := passMin[db]; ok {
				min = m
			}
			check := checks[db](min)
			if check.ID != "database."+db {
				t.Fatalf("ID %s", check.ID)
			}
			data := func(mut func(map[string]string)) map[string]string {
				d := map[string]string{"host": host, "port": port, "username": users[db][0], "password": users[db][1]}
				if d["username"] == "" {
					delete(d, "username")
				}
				if mut != nil {
					mut(d)
				}
				return d
			}

			t.Run("pass", func(t *testing.T) {
				connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(nil))
				o := connRunCheck(t, env, check)
				connExpect(t, o, Pass, products[db], addr, "accepted the credentials in Secret "+ref, "from this machine")
				if len(o.Details) == 0 || !strings.Contains(o.Details[0], "pods") {
					t.Errorf("no advisory note about the pods' network: %v", o.Details)
				}
			})
			t.Run("supported minimum", func(t *testing.T) {
				connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(nil))
				o := connRunCheck(t, env, checks[db](mins[db]))
				if db == "rabbitmq" {
					connExpect(t, o, Fail, "version 3.10", "older than the supported minimum 3.11", "|", "upgrade the RabbitMQ server to 3.11")
				} else {
					connExpect(t, o, Pass, products[db])
				}
			})
			t.Run("too old", func(t *testing.T) {
				o := connRunCheck(t, env, checks[db]("999.1"))
				connExpect(t, o, Fail, "older than the supported minimum 999.1", "|", "upgrade")
			})
			t.Run("wrong password", func(t *testing.T) {
				connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(func(d map[string]string) { d["password"] = "wrong" }))
				o := connRunCheck(t, env, check)
				connExpect(t, o, Fail, "the server refused the credentials in Secret "+ref, "|", "password")
			})
			if db != "redis" {
				t.Run("unknown user", func(t *testing.T) {
					connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(func(d map[string]string) { d["username"] = "nobody" }))
					o := connRunCheck(t, env, check)
					connExpect(t, o, Fail, "the server refused the credentials in Secret "+ref, "(user nobody)")
				})
			} else {
				t.Run("ACL user", func(t *testing.T) {
					// AUTH default <password> is the ACL form of AUTH <password>.
					connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(func(d map[string]string) { d["username"] = "default" }))
					connExpect(t, connRunCheck(t, env, check), Pass, "Redis")
				})
			}
			t.Run("unreachable", func(t *testing.T) {
				free := strconv.Itoa(testservers.FreePort(t))
				connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(func(d map[string]string) { d["port"] = free }))
				o := connRunCheck(t, env, check)
				connExpect(t, o, Fail, "cannot reach", "127.0.0.1:"+free, "connection refused", "|", "host and port of Secret "+ref)
			})
			t.Run("tls against a plain server", func(t *testing.T) {
				connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(func(d map[string]string) { d["tls"] = "true" }))
				o := connRunCheck(t, env, check)
				connExpect(t, o, Fail, addr, "|", "TLS")
			})
			if db == "mongodb" {
				// A replica set named in the Secret: the seed must be one
				// of its members. The ring's MongoDB (FerretDB) is a
				// standalone server.
				t.Run("replica set of a standalone server", func(t *testing.T) {
					connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(func(d map[string]string) { d["replicaSet"] = "rs0" }))
					o := connRunCheck(t, env, check)
					connExpect(t, o, Fail, `Secret `+ref+` names replica set "rs0"`, "not a member of a replica set", "|", "remove its key replicaSet")
				})
			}
			t.Run("bad tls value", func(t *testing.T) {
				connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(func(d map[string]string) { d["tls"] = "yes" }))
				connExpect(t, connRunCheck(t, env, check), Fail, `tls is "yes"`)
			})
			t.Run("missing keys", func(t *testing.T) {
				connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(func(d map[string]string) { delete(d, "password"); d["port"] = "" }))
				o := connRunCheck(t, env, check)
				connExpect(t, o, Fail, "Secret "+ref, "lacks the keys port, password", "|", "add the missing keys")
			})
			t.Run("missing Secret", func(t *testing.T) {
				connDeleteSecret(t, env, secret)
				o := connRunCheck(t, env, check)
				connExpect(t, o, Fail, "Secret "+ref, "does not exist", "|", "create secret generic "+secret)
			})
			t.Run("no permission to read the Secret", func(t *testing.T) {
				connPutSecret(t, env, secret, corev1.SecretTypeOpaque, data(nil))
				o := connRunCheck(t, connAsNobody(t, env), check)
				connExpect(t, o, Fail, "could not run", "not allowed to read Secret "+ref, "|", "get secrets")
			})
			t.Run("in-cluster", func(t *testing.T) {
				in := *env.Installation
				for _, d := range in.Spec.Databases.All() {
					if d.Name == db {
						d.Mode = "internal"
					}
				}
				e := *env
				e.Installation = &in
				connExpect(t, connRunCheck(t, &e, check), Pass, "in-cluster")
			})
		})
	}

	t.Run("a hung server is bounded by the context", func(t *testing.T) {
		// A listener that accepts and never answers.
		l := connHangingListener(t)
		connPutSecret(t, env, "postgresql-conn", corev1.SecretTypeOpaque, map[string]string{"host": "127.0.0.1", "port": fmt.Sprint(l), "username": "u", "password": "p"})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		t0 := time.Now()
		o := postgresqlCheck(minPostgreSQL).Run(ctx, env)
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("took %s with a 2s context", d)
		}
		connExpect(t, o, Fail, "did not complete a handshake")
	})
}
