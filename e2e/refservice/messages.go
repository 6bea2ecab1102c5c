package refservice

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The messages a service publishes go to a durable queue of its own,
// declared without a type: the broker's default queue type decides it (a
// quorum queue with spec.availability high, where the platform's virtual
// host makes quorum the default).

// QueueName is the queue of a service's messages.
func QueueName(service string) string { return service + ".messages" }

// maxTake bounds how many messages one Take returns.
const maxTake = 100000

// ErrNoRabbitMQ: the service uses no RabbitMQ.
var ErrNoRabbitMQ = errors.New("this service uses no RabbitMQ")

// Publish sends body to the service's queue as a persistent message and
// returns nil only once the broker confirms it (for a quorum queue: once
// a majority of its members have it).
func (s *Service) Publish(ctx context.Context, body string) error {
	ch, closeConn, err := s.rabbitChannel(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("rabbitmq: confirm mode: %w", err)
	}
	q := QueueName(s.cfg.Service)
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "text/plain", Body: []byte(body)})
	if err != nil {
		return fmt.Errorf("rabbitmq: publishing to %s: %w", q, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: waiting for the confirm of %s: %w", q, err)
	}
	if !ok {
		return fmt.Errorf("rabbitmq: the broker refused the message to %s (nack)", q)
	}
	return nil
}

// Take consumes every message in the service's queue (up to maxTake),
// acknowledging each, and returns their bodies in queue order.
func (s *Service) Take(ctx context.Context) ([]string, error) {
	ch, closeConn, err := s.rabbitChannel(ctx)
	if err != nil {
		return nil, err
	}
	defer closeConn()
	q := QueueName(s.cfg.Service)
	var out []string
	for len(out) < maxTake {
		m, ok, err := ch.Get(q, false)
		if err != nil {
			return out, fmt.Errorf("rabbitmq: reading %s: %w", q, err)
		}
		if !ok {
			break
		}
		if err := m.Ack(false); err != nil {
			return out, fmt.Errorf("rabbitmq: acknowledging a message of %s: %w", q, err)
		}
		out = append(out, string(m.Body))
	}
	return out, nil
}

// rabbitChannel connects to RabbitMQ with the service's credentials (within
// ctx's deadline), opens a channel and declares the service's queue.
func (s *Service) rabbitChannel(ctx context.Context) (*amqp.Channel, func(), error) {
	e := s.cfg.RabbitMQ
	if e == nil {
		return nil, nil, ErrNoRabbitMQ
	}
	c, err := rabbitDial(ctx, e)
	if err != nil {
		return nil, nil, fmt.Errorf("rabbitmq: %w", err)
	}
	ch, err := c.Channel()
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("rabbitmq: %w", err)
	}
	q := QueueName(s.cfg.Service)
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("rabbitmq: declaring %s: %w", q, err)
	}
	return ch, func() { c.Close() }, nil
}
