package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/auth"
)

// reservedDatabases belong to the server, never to a service.
var reservedDatabases = []string{"admin", "local", "config"}

// authErrorCodes are MongoDB's Unauthorized and AuthenticationFailed:
// retrying with the same credentials will not help.
var authErrorCodes = []int{13, 18}

type provisioner struct {
	servicesFile string
	secretsDir   string
	getenv       func(string) string
	attempts     int
	pause        time.Duration
	out          io.Writer
}

func (p *provisioner) log(format string, args ...any) {
	fmt.Fprintf(p.out, "db-provision: mongodb: "+format+"\n", args...)
}

func (p *provisioner) env(name string) (string, error) {
	v := p.getenv(name)
	if v == "" {
		return "", fmt.Errorf("environment variable %s is not set", name)
	}
	return v, nil
}

func (p *provisioner) run(ctx context.Context) error {
	services, err := p.services()
	if err != nil {
		return err
	}
	if len(services) == 0 {
		p.log("no service uses MongoDB")
		return nil
	}
	client, err := p.connect(ctx)
	if err != nil {
		return err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	for _, s := range services {
		if err := p.provision(ctx, client, s); err != nil {
			return err
		}
	}
	p.log("done: %d service(s)", len(services))
	return nil
}

func (p *provisioner) services() ([]string, error) {
	data, err := os.ReadFile(p.servicesFile)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(string(data), "\n") {
		if name := strings.TrimSpace(line); name != "" {
			names = append(names, name)
		}
	}
	return names, nil
}

// secret is the exact content of one key of a service's Secret: the value
// the service itself reads (no trimming).
func (p *provisioner) secret(service, key string) (string, error) {
	data, err := os.ReadFile(filepath.Join(p.secretsDir, service, key))
	if err != nil {
		return "", fmt.Errorf("the MongoDB Secret of %s: %w", service, err)
	}
	if len(data) == 0 {
		return "", fmt.Errorf("key %s of the MongoDB Secret of %s is empty", key, service)
	}
	return string(data), nil
}

func (p *provisioner) connect(ctx context.Context) (*mongo.Client, error) {
	host, err := p.env("MONGODB_HOST")
	if err != nil {
		return nil, err
	}
	port, err := p.env("MONGODB_PORT")
	if err != nil {
		return nil, err
	}
	user, err := p.env("MONGODB_ADMIN_USERNAME")
	if err != nil {
		return nil, err
	}
	password, err := p.env("MONGODB_ADMIN_PASSWORD")
	if err != nil {
		return nil, err
	}
	where := net.JoinHostPort(strings.Trim(host, "[]"), port)
	opts := options.Client().SetHosts([]string{where}).
		SetServerSelectionTimeout(5 * time.Second).
		SetConnectTimeout(5 * time.Second).
		SetAuth(options.Credential{Username: user, Password: password, AuthSource: "admin"})
	if strings.EqualFold(p.getenv("MONGODB_TLS"), "true") {
		opts.SetTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	// As the scripts: the host is a seed of this replica set.
	if rs := p.getenv("MONGODB_REPLICA_SET"); rs != "" {
		opts.SetReplicaSet(rs)
	}
	var last error
	for attempt := 1; attempt <= p.attempts; attempt++ {
		client, err := mongo.Connect(opts)
		if err != nil {
			return nil, fmt.Errorf("connection settings for %s: %w", where, err)
		}
		err = client.Database("admin").RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err()
		if err == nil {
			p.log("connected to %s", where)
			return client, nil
		}
		_ = client.Disconnect(context.WithoutCancel(ctx))
		if isAuthError(err) {
			return nil, fmt.Errorf("the admin user cannot log in to %s: %w", where, err)
		}
		last = err
		p.log("cannot reach %s yet (attempt %d of %d): %v", where, attempt, p.attempts, err)
		if attempt == p.attempts {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot reach %s: %w", where, ctx.Err())
		case <-time.After(p.pause):
		}
	}
	return nil, fmt.Errorf("cannot reach %s: %w", where, last)
}

// isAuthError tells a refused login from a server that is not up yet.
func isAuthError(err error) bool {
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return false
	}
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, c := range authErrorCodes {
			if se.HasErrorCode(c) {
				return true
			}
		}
	}
	var ae *auth.Error
	return errors.As(err, &ae)
}

func (p *provisioner) provision(ctx context.Context, client *mongo.Client, service string) error {
	username, err := p.secret(service, "username")
	if err != nil {
		return err
	}
	password, err := p.secret(service, "password")
	if err != nil {
		return err
	}
	database, err := p.secret(service, "database")
	if err != nil {
		return err
	}
	if slices.Contains(reservedDatabases, database) {
		return fmt.Errorf("the MongoDB Secret of %s names the database %q, which belongs to the server", service, database)
	}
	db := client.Database(database)
	what := fmt.Sprintf("user %q of database %q for %s", username, database, service)

	var info struct {
		Users []bson.Raw `bson:"users"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "usersInfo", Value: bson.D{{Key: "user", Value: username}, {Key: "db", Value: database}}}}).Decode(&info); err != nil {
		return fmt.Errorf("looking up %s: %w", what, err)
	}
	if len(info.Users) == 0 {
		if err := db.RunCommand(ctx, bson.D{{Key: "createUser", Value: username}, {Key: "pwd", Value: password}, {Key: "roles", Value: bson.A{}}}).Err(); err != nil {
			return fmt.Errorf("creating %s: %w", what, err)
		}
		p.log("created %s", what)
		return nil
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "updateUser", Value: username}, {Key: "pwd", Value: password}}).Err(); err != nil {
		return fmt.Errorf("updating %s: %w", what, err)
	}
	p.log("updated %s", what)
	return nil
}
