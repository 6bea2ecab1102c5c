package refservice

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// mongoStore keeps records in the service's own MongoDB database, as its
// own user (authenticated against that database, where db-provision
// creates it).
type mongoStore struct {
	client *mongo.Client
	db     *mongo.Database
}

func newMongo(_ context.Context, e *Endpoint) (*mongoStore, error) {
	opts := options.Client().SetHosts([]string{e.Addr()}).
		SetAuth(options.Credential{Username: e.Username, Password: e.Password, AuthSource: e.Database}).
		SetServerSelectionTimeout(3 * time.Second).
		// The connect timeout also bounds a new connection's handshake
		// (authentication included), and the driver clears the whole pool
		// when one fails: 3 s made a node busy with every pod restarting
		// fail the requests in flight on healthy connections too.
		SetConnectTimeout(10 * time.Second)
	if e.ReplicaSet != "" {
		// Writes follow the primary through a failover.
		opts.SetReplicaSet(e.ReplicaSet)
	}
	c, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("mongodb: %w", err)
	}
	return &mongoStore{client: c, db: c.Database(e.Database)}, nil
}

func (m *mongoStore) ping(ctx context.Context) error {
	// A command on the service's own database proves the credentials, not
	// only the connection.
	return m.db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err()
}

func (m *mongoStore) put(ctx context.Context, key, value, version string) error {
	_, err := m.db.Collection("records").ReplaceOne(ctx, bson.D{{Key: "_id", Value: key}},
		bson.D{{Key: "_id", Value: key}, {Key: "value", Value: value}, {Key: "version", Value: version}},
		options.Replace().SetUpsert(true))
	return err
}

func (m *mongoStore) get(ctx context.Context, key string) (string, error) {
	var doc struct {
		Value string `bson:"value"`
	}
	err := m.db.Collection("records").FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return "", ErrNotFound
	}
	return doc.Value, err
}

func (m *mongoStore) migrate(ctx context.Context, to string) error {
	_, err := m.db.Collection("migrations").InsertOne(ctx, bson.D{{Key: "to", Value: to}, {Key: "at", Value: time.Now().UTC()}})
	return err
}

func (m *mongoStore) close(ctx context.Context) { _ = m.client.Disconnect(ctx) }

// pgStore keeps records in the service's own PostgreSQL database.
type pgStore struct {
	url   string
	mu    sync.Mutex
	ready bool
}

func newPostgres(e *Endpoint) *pgStore {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(e.Username, e.Password), Host: e.Addr(), Path: "/" + e.Database,
		RawQuery: "sslmode=disable&connect_timeout=3"}
	return &pgStore{url: u.String()}
}

// conn opens a connection and makes sure the tables exist.
func (p *pgStore) conn(ctx context.Context) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ready {
		if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS records (key text PRIMARY KEY, value text NOT NULL, version text NOT NULL);
CREATE TABLE IF NOT EXISTS migrations (target text NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
			c.Close(ctx)
			return nil, err
		}
		p.ready = true
	}
	return c, nil
}

func (p *pgStore) ping(ctx context.Context) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}

func (p *pgStore) put(ctx context.Context, key, value, version string) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `INSERT INTO records (key, value, version) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version`, key, value, version)
	return err
}

func (p *pgStore) get(ctx context.Context, key string) (string, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	var v string
	err = c.QueryRow(ctx, `SELECT value FROM records WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return v, err
}

func (p *pgStore) migrate(ctx context.Context, to string) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `INSERT INTO migrations (target) VALUES ($1)`, to)
	return err
}

func (p *pgStore) close(context.Context) {}

// redisPing authenticates with the password and sends PING (RESP by hand:
// two commands do not need a client library).
func redisPing(ctx context.Context, e *Endpoint) error {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", e.Addr())
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	r := bufio.NewReader(conn)
	for _, cmd := range [][]string{{"AUTH", e.Password}, {"PING"}} {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(cmd))
		for _, a := range cmd {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.HasPrefix(line, "-") {
			return fmt.Errorf("%s: %s", cmd[0], strings.TrimSpace(line[1:]))
		}
	}
	return nil
}

// rabbitDial opens an AMQP connection with the credentials, within ctx's
// deadline.
func rabbitDial(ctx context.Context, e *Endpoint) (*amqp.Connection, error) {
	u := url.URL{Scheme: "amqp", User: url.UserPassword(e.Username, e.Password), Host: e.Addr(), Path: "/"}
	cfg := amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	if dl, ok := ctx.Deadline(); ok {
		cfg.Heartbeat = time.Until(dl)
	}
	return amqp.DialConfig(u.String(), cfg)
}

// rabbitPing opens an AMQP connection and a channel with the credentials.
func rabbitPing(ctx context.Context, e *Endpoint) error {
	c, err := rabbitDial(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	return ch.Close()
}
