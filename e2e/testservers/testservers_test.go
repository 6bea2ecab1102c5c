//go:build linux

package testservers

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestRedisRequiresItsPassword(t *testing.T) {
	t.Parallel()
	addr := Redis(t, "s3cret")
	if err := redisPing(ctx(t), addr, "s3cret"); err != nil {
		t.Fatal(err)
	}
	if err := redisPing(ctx(t), addr, "wrong"); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong password: %v", err)
	}
	if err := redisPing(ctx(t), addr, ""); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("no password: %v", err)
	}
}

func TestPostgreSQLRequiresItsPassword(t *testing.T) {
	t.Parallel()
	addr := PostgreSQL(t, "app", "p@ss:w/rd")
	c, err := pgx.Connect(ctx(t), fmt.Sprintf("postgres://app:%s@%s/postgres?sslmode=disable", urlEscape("p@ss:w/rd"), addr))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx(t), "select 1+1").Scan(&n); err != nil || n != 2 {
		t.Errorf("query: %d %v", n, err)
	}
	c.Close(ctx(t))
	_, err = pgx.Connect(ctx(t), "postgres://app:wrong@"+addr+"/postgres?sslmode=disable")
	var pe *pgconn.PgError
	if err == nil || !asPgError(err, &pe) || pe.Code != "28P01" {
		t.Errorf("wrong password: %v", err)
	}
}

func TestRabbitMQRequiresItsPassword(t *testing.T) {
	t.Parallel()
	addr := RabbitMQ(t, "bus", "s3cret")
	c, err := amqp.Dial("amqp://bus:s3cret@" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Properties["version"].(string); v == "" {
		t.Errorf("no version in server properties: %v", c.Properties)
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q", false, true, false, false, nil); err != nil {
		t.Errorf("declare: %v", err)
	}
	c.Close()
	if _, err := amqp.Dial("amqp://bus:wrong@" + addr + "/"); err == nil {
		t.Error("a wrong password was accepted")
	}
}

func TestMongoDBRequiresItsPassword(t *testing.T) {
	t.Parallel()
	addr := MongoDB(t, "root", "s3cret")
	connect := func(pw string) (*mongo.Client, error) {
		return mongo.Connect(options.Client().SetHosts([]string{addr}).SetDirect(true).
			SetAuth(options.Credential{Username: "root", Password: pw, AuthSource: "admin"}).
			SetServerSelectionTimeout(5 * time.Second))
	}
	c, err := connect("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(context.Background())
	var info struct{ Version string }
	if err := c.Database("admin").RunCommand(ctx(t), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil || !strings.HasPrefix(info.Version, "7.") {
		t.Errorf("buildInfo: %q %v", info.Version, err)
	}
	if _, err := c.Database("app").Collection("c").InsertOne(ctx(t), bson.D{{Key: "a", Value: 1}}); err != nil {
		t.Errorf("insert: %v", err)
	}
	bad, err := connect("wrong")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Disconnect(context.Background())
	if err := bad.Database("admin").RunCommand(ctx(t), bson.D{{Key: "ping", Value: 1}}).Err(); err == nil {
		t.Error("a wrong password was accepted")
	}
}

func TestRegistryWithBasicAuth(t *testing.T) {
	t.Parallel()
	host := Registry(t, WithBasicAuth("u", "p"))
	img, err := random.Image(128, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.NewTag(host + "/mirror/library/redis:7")
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: "u", Password: "p"})); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(ref, remote.WithAuth(&authn.Basic{Username: "u", Password: "p"})); err != nil {
		t.Errorf("head: %v", err)
	}
	_, err = remote.Head(ref, remote.WithAuth(&authn.Basic{Username: "u", Password: "x"}))
	var te *transport.Error
	if !asTransportError(err, &te) || te.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong password: %v", err)
	}
}
