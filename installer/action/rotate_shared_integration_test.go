package action

import (
	"context"
	"testing"
	"time"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/kube"
)

// rotationPlatform is a platform installed on a real API server (kwok),
// which rotations that each stand up their own database share.
type rotationPlatform struct {
	c   *testcluster.Cluster
	src Source
	cl  kube.Options
}

// The logins every service shares (RabbitMQ's, Redis's password) and the
// PostgreSQL and MongoDB admins, rotated one after the other on one
// installed platform, each against a real server of its own; then a
// rotation of every service login and both admins SIGKILLed at one step
// after another (see each function for what it proves).
func TestRotateSharedLoginsAndAdmin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testcluster.Start(t)
	src, cl := clusterConfig(t, c, smallPlatform)
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	p := rotationPlatform{c: c, src: src, cl: cl}
	t.Run("RabbitMQ", func(t *testing.T) { rotateRabbitMQLogin(t, p) })
	t.Run("Redis", func(t *testing.T) { rotateRedisPassword(t, p) })
	t.Run("PostgreSQLAdmin", func(t *testing.T) { rotatePostgreSQLAdmin(t, p) })
	t.Run("MongoDBAdmin", func(t *testing.T) { rotateMongoDBAdmin(t, p) })
	t.Run("KilledMidway", func(t *testing.T) { rotateKilled(t, p) })
}
