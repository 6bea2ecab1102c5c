package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// mongodbCheck connects to an external MongoDB with the Secret's user
// (authenticating against the admin database, SCRAM) and reads the server
// version from buildInfo.
func mongodbCheck(min string) Check {
	return databaseSpec{name: "mongodb", product: "MongoDB", min: min, handshake: mongoHandshake}.check()
}

// mongoAuthFailed is MongoDB's AuthenticationFailed error code.
const mongoAuthFailed = 18

func mongoHandshake(ctx context.Context, ep *dbEndpoint) (string, error) {
	timeout := dbHandshakeTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	opts := options.Client().
		SetHosts([]string{ep.Addr()}).
		SetDirect(true).
		SetAppName("onprem-preflight").
		SetAuth(options.Credential{Username: ep.Username, Password: ep.Password, AuthSource: "admin"}).
		SetConnectTimeout(timeout).
		SetServerSelectionTimeout(timeout).
		SetMaxPoolSize(1).
		SetRetryReads(false)
	if ep.TLS {
		opts.SetTLSConfig(ep.tlsConfig())
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return "", err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = client.Disconnect(dctx)
	}()
	var info struct {
		Version string `bson:"version"`
	}
	// The first command opens a connection: hello, then authentication.
	err = client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info)
	if err != nil {
		return "", classifyMongoError(err)
	}
	if info.Version == "" {
		return "", fmt.Errorf("buildInfo returned no version")
	}
	if ep.ReplicaSet != "" {
		// The services connect to the set through this seed: it must be
		// a member of the set the Secret names.
		var hello struct {
			SetName string `bson:"setName"`
		}
		if err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
			return "", classifyMongoError(err)
		}
		if hello.SetName != ep.ReplicaSet {
			return "", &replicaSetError{got: hello.SetName}
		}
	}
	return info.Version, nil
}

// replicaSetError says that the server is not a member of the replica set
// the Secret names.
type replicaSetError struct{ got string }

func (e *replicaSetError) Error() string { return "replica set: " + e.found() }

func (e *replicaSetError) found() string {
	if e.got == "" {
		return "is not a member of a replica set (a standalone server)"
	}
	return fmt.Sprintf("is a member of replica set %q", e.got)
}

func (e *replicaSetError) remediation(secret string) string {
	if e.got == "" {
		return fmt.Sprintf("give a member of the replica set in the keys host and port of Secret %s, or remove its key replicaSet for a standalone server", secret)
	}
	return fmt.Sprintf("set the key replicaSet of Secret %s to %q, or give a member of the intended set in its keys host and port", secret, e.got)
}

func classifyMongoError(err error) error {
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(mongoAuthFailed) {
		return credentialsError(err)
	}
	s := err.Error()
	if strings.Contains(s, "AuthenticationFailed") || strings.Contains(s, "auth error") || strings.Contains(s, "Authentication failed") {
		return credentialsError(err)
	}
	return classifyNetError(err)
}
