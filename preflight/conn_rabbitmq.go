package preflight

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitmqCheck opens an AMQP 0-9-1 connection to an external RabbitMQ
// (vhost /, PLAIN with the Secret's user) and reads the server's version
// from the connection.start server-properties.
func rabbitmqCheck(min string) Check {
	return databaseSpec{name: "rabbitmq", product: "RabbitMQ", min: min, handshake: rabbitmqHandshake}.check()
}

func rabbitmqHandshake(ctx context.Context, ep *dbEndpoint) (string, error) {
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", ep.Addr())
	if err != nil {
		return "", classifyNetError(err)
	}
	conn := raw
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	// amqp091 does its handshake without a context: closing the socket
	// when ctx ends bounds it.
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	defer stop()
	if ep.TLS {
		tc := tls.Client(raw, ep.tlsConfig())
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return "", &handshakeError{kind: problemTLS, err: err}
		}
		conn = tc
	}
	c, err := amqp.Open(conn, amqp.Config{
		SASL:       []amqp.Authentication{&amqp.PlainAuth{Username: ep.Username, Password: ep.Password}},
		Vhost:      "/",
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": "onprem-preflight", "product": "onprem", "version": "preflight"},
	})
	if err != nil {
		raw.Close()
		var ae *amqp.Error
		if errors.As(err, &ae) {
			switch ae.Code {
			case amqp.AccessRefused:
				return "", credentialsError(err)
			case amqp.NotAllowed:
				return "", credentialsError(fmt.Errorf("%w (the user may not use vhost /)", err))
			}
		}
		return "", classifyNetError(err)
	}
	defer c.Close()
	v, _ := c.Properties["version"].(string)
	if v == "" {
		return "", fmt.Errorf("the server's connection.start carries no version (product %v)", c.Properties["product"])
	}
	return v, nil
}
