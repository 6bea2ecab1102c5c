package action

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/rotate"
	"onprem.dev/onprem/installer/state"
)

// RabbitMQ's one login, which every service shares, alternates like a
// service's own: the second user is made with rabbitmqctl in RabbitMQ's
// pod (a real RabbitMQ here), the Secret switches, the services roll (not
// RabbitMQ's own StatefulSet, which reads the Secret for its first user),
// and the old user is deleted. A run killed before the deletion leaves
// both users working, and the next run finishes it.
func rotateRabbitMQLogin(t *testing.T, plat rotationPlatform) {
	ctx := context.Background()
	c, src, cl := plat.c, plat.src, plat.cl
	const ns = "onprem"
	target := Target{Cluster: cl, ConfigPath: src.ConfigPath}
	secret := func() (user, password string, retire string) {
		t.Helper()
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, credentials.RabbitMQ, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(s.Data["username"]), string(s.Data["password"]), s.Annotations[rotate.AnnotationRetire]
	}
	user0, pass0, _ := secret()
	mq := testservers.StartRabbitMQ(t, user0, pass0)
	ex := backuptest.NewExec(t, &backuptest.Servers{RabbitMQ: mq})
	login := func(user, password string) error {
		u := url.URL{Scheme: "amqp", User: url.UserPassword(user, password), Host: mq.Addr, Path: "/"}
		conn, err := amqp.DialConfig(u.String(), amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
			return net.DialTimeout(network, addr, 5*time.Second)
		}})
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		// The rights a service needs: declare, publish, consume.
		q, err := ch.QueueDeclare("rotation-check", false, true, false, false, nil)
		if err != nil {
			return err
		}
		if err := ch.PublishWithContext(ctx, "", q.Name, false, false, amqp.Publishing{Body: []byte("hello")}); err != nil {
			return err
		}
		return ch.Close()
	}
	if err := login(user0, pass0); err != nil {
		t.Fatalf("the installed login: %v", err)
	}
	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, "rabbitmq", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rabbitTemplate := sts.Spec.Template.Annotations[rotate.AnnotationCredentials]
	rotateMQ := func(dry bool) (*RotateCredentialsResult, error) {
		return (&RotateCredentials{Target: target, Engines: []string{rotate.RabbitMQ}, Exec: ex, DryRun: dry, Timeout: time.Minute,
			Progress: func(line string) { t.Log(line) }}).Run(ctx)
	}

	dry, err := rotateMQ(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Engines) != 1 || len(dry.Engines[0].Logins) != 1 || dry.Engines[0].Logins[0].To != user0+"_2" || len(dry.Engines[0].Restarted) == 0 {
		t.Fatalf("dry run: %+v", dry)
	}
	for _, w := range dry.Engines[0].Restarted {
		if w == "StatefulSet/rabbitmq" {
			t.Error("the dry run would restart RabbitMQ itself")
		}
	}
	if u, p, _ := secret(); u != user0 || p != pass0 {
		t.Fatal("a dry run changed the Secret")
	}

	// Killed at the deletion of the old user (the second command run in
	// RabbitMQ's pod): both users work, the Secret names the new one.
	var calls atomic.Int32
	ex.Before = func(_ podexec.Target, _ []string) error {
		if calls.Add(1) == 2 {
			return errors.New("killed")
		}
		return nil
	}
	if _, err := rotateMQ(false); err == nil || !strings.Contains(err.Error(), "run the rotation again") {
		t.Fatalf("a rotation killed before revoking: %v", err)
	}
	user1, pass1, retire := secret()
	if user1 != user0+"_2" || retire != user0 || pass1 == pass0 {
		t.Fatalf("after the kill: login %s, to retire %q, a new password %v", user1, retire, pass1 != pass0)
	}
	for _, l := range [][2]string{{user0, pass0}, {user1, pass1}} {
		if err := login(l[0], l[1]); err != nil {
			t.Errorf("killed before revoking: %s is refused: %v", l[0], err)
		}
	}
	ex.Before = nil
	res, err := rotateMQ(false)
	if err != nil {
		t.Fatal(err)
	}
	if l := res.Engines[0].Logins[0]; l.Resumed != "revoking" || l.From != user0 || l.To != user1 || l.Service != rotate.SharedLogin {
		t.Errorf("the run after the kill: %+v", l)
	}
	if err := login(user0, pass0); err == nil {
		t.Error("the old RabbitMQ login is still accepted")
	}
	if err := login(user1, pass1); err != nil {
		t.Errorf("the new login: %v", err)
	}

	// The next rotation goes back to the first user, with a new password.
	if _, err := rotateMQ(false); err != nil {
		t.Fatal(err)
	}
	user2, pass2, retire := secret()
	if user2 != user0 || pass2 == pass0 || retire != "" {
		t.Fatalf("the second rotation: login %s, a new password %v, to retire %q", user2, pass2 != pass0, retire)
	}
	if err := login(user1, pass1); err == nil {
		t.Error("the second user is still accepted after the second rotation")
	}
	if err := login(user2, pass2); err != nil {
		t.Errorf("the first user with its new password: %v", err)
	}
	// How the e2e checks a login in RabbitMQ's pod (rabbitmqctl, the
	// password on its standard input) agrees with AMQP.
	auth := func(user, password string) error {
		cmd := []string{"sh", "-c", `IFS= read -r password; printf '%s\n' "$password" | exec rabbitmqctl --quiet authenticate_user "$1"`, "sh", user}
		return ex.Exec(ctx, podexec.Target{Container: "rabbitmq"}, cmd, strings.NewReader(password+"\n"), io.Discard)
	}
	if err := auth(user2, pass2); err != nil {
		t.Errorf("rabbitmqctl authenticate_user refuses the current login: %v", err)
	}
	if err := auth(user1, pass1); err == nil {
		t.Error("rabbitmqctl authenticate_user accepts the retired login")
	}

	// Services rolled; RabbitMQ itself did not.
	if sts, err = c.Client.AppsV1().StatefulSets(ns).Get(ctx, "rabbitmq", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if sts.Spec.Template.Annotations[rotate.AnnotationCredentials] != rabbitTemplate {
		t.Error("the rotation restarted RabbitMQ's StatefulSet")
	}
	deps, err := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		reads := false
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == credentials.RabbitMQ {
				reads = true
			}
		}
		if annotated := d.Spec.Template.Annotations[rotate.AnnotationCredentials] != ""; reads != annotated {
			t.Errorf("Deployment %s: reads the RabbitMQ Secret %v, restarted %v", d.Name, reads, annotated)
		}
	}

	st := loadState(t, c.Client)
	for _, op := range st.History {
		for _, p := range []string{pass0, pass1, pass2} {
			if strings.Contains(op.Message, p) {
				t.Errorf("the history holds a password: %s", op.Kind)
			}
		}
	}
	if last := st.History[len(st.History)-1]; last.Outcome != state.OutcomeSucceeded || !strings.Contains(last.Message, "rabbitmq "+rotate.SharedLogin+" "+user1+" → "+user0) {
		t.Errorf("the last operation: %s %q", last.Outcome, last.Message)
	}
}
