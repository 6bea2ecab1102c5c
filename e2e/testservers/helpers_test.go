//go:build linux

package testservers

import (
	"errors"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/jackc/pgx/v5/pgconn"
)

func asPgError(err error, pe **pgconn.PgError) bool         { return errors.As(err, pe) }
func asTransportError(err error, te **transport.Error) bool { return errors.As(err, te) }
