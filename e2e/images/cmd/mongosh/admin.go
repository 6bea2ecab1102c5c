package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// runAdmin does what installer/rotate/mongodb-admin.js does: grant or
// revoke (ONPREM_ADMIN_ACTION) the admin login whose username (and, to
// grant, password) are files of ONPREM_LOGIN_DIR, connected as
// MONGODB_ADMIN_USERNAME. As with provisioning, FerretDB v1 takes no
// roles, so the user is created with none where the script gives root.
func runAdmin(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) int {
	p := &provisioner{getenv: getenv, attempts: 1, pause: time.Second, out: stdout}
	logf := func(format string, args ...any) { fmt.Fprintf(stdout, "onprem rotate: mongodb: "+format+"\n", args...) }
	if err := admin(ctx, p, logf); err != nil {
		fmt.Fprintf(stderr, "onprem rotate: mongodb: %v\n", err)
		return 1
	}
	return 0
}

func admin(ctx context.Context, p *provisioner, logf func(string, ...any)) error {
	action, err := p.env("ONPREM_ADMIN_ACTION")
	if err != nil {
		return err
	}
	dir, err := p.env("ONPREM_LOGIN_DIR")
	if err != nil {
		return err
	}
	value := func(key string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, key))
		if err != nil {
			return "", fmt.Errorf("the %s of the admin login: %w", key, err)
		}
		if len(b) == 0 {
			return "", fmt.Errorf("the %s of the admin login is empty", key)
		}
		return string(b), nil
	}
	username, err := value("username")
	if err != nil {
		return err
	}
	if action != "grant" && action != "revoke" {
		return fmt.Errorf("ONPREM_ADMIN_ACTION is %q, not grant or revoke", action)
	}
	client, err := p.connect(ctx)
	if err != nil {
		return err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	db := client.Database("admin")
	what := fmt.Sprintf("admin user %q", username)
	var info struct {
		Users []bson.Raw `bson:"users"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "usersInfo", Value: bson.D{{Key: "user", Value: username}, {Key: "db", Value: "admin"}}}}).Decode(&info); err != nil {
		return fmt.Errorf("looking up %s: %w", what, err)
	}
	exists := len(info.Users) > 0
	if action == "revoke" {
		if username == p.getenv("MONGODB_ADMIN_USERNAME") {
			return fmt.Errorf("refusing to revoke %s: the script runs as that user", what)
		}
		if !exists {
			logf("%s does not exist: revoked already", what)
			return nil
		}
		if err := db.RunCommand(ctx, bson.D{{Key: "dropUser", Value: username}}).Err(); err != nil {
			return fmt.Errorf("dropping %s: %w", what, err)
		}
		logf("dropped %s", what)
		return nil
	}
	password, err := value("password")
	if err != nil {
		return err
	}
	if !exists {
		if err := db.RunCommand(ctx, bson.D{{Key: "createUser", Value: username}, {Key: "pwd", Value: password}, {Key: "roles", Value: bson.A{}}}).Err(); err != nil {
			return fmt.Errorf("creating %s: %w", what, err)
		}
		logf("created %s", what)
		return nil
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "updateUser", Value: username}, {Key: "pwd", Value: password}}).Err(); err != nil {
		return fmt.Errorf("updating %s: %w", what, err)
	}
	logf("updated %s", what)
	return nil
}
