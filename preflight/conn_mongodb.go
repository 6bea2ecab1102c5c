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
	return info.Version, nil
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
