package preflight

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// postgresqlCheck connects to an external PostgreSQL as the Secret's user
// (database postgres) and reads server_version.
func postgresqlCheck(min string) Check {
	return databaseSpec{name: "postgresql", product: "PostgreSQL", min: min, handshake: postgresHandshake}.check()
}

func postgresHandshake(ctx context.Context, ep *dbEndpoint) (string, error) {
	// An empty connection string still reads PG* environment variables;
	// every field that matters is set below.
	cfg, err := pgx.ParseConfig("sslmode=disable")
	if err != nil {
		return "", err
	}
	cfg.Host = ep.Host
	cfg.Port = uint16(ep.Port)
	cfg.User = ep.Username
	cfg.Password = ep.Password
	cfg.Database = "postgres"
	cfg.Fallbacks = nil
	cfg.TLSConfig = nil
	if ep.TLS {
		cfg.TLSConfig = ep.tlsConfig()
	}
	cfg.ConnectTimeout = dbHandshakeTimeout
	if dl, ok := ctx.Deadline(); ok {
		cfg.ConnectTimeout = time.Until(dl)
	}
	cfg.RuntimeParams = map[string]string{"application_name": "onprem-preflight"}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", classifyPostgresError(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	v := conn.PgConn().ParameterStatus("server_version")
	if v == "" {
		return "", fmt.Errorf("the server reported no server_version")
	}
	return v, nil
}

func classifyPostgresError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000": // invalid_password, invalid_authorization_specification
			return credentialsError(err)
		}
		return &handshakeError{kind: problemProtocol, err: err}
	}
	return classifyNetError(err)
}
