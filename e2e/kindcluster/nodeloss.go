//go:build linux

package kindcluster

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/internal/cmdout"
)

// KillNode kills a node's container at once (docker kill: SIGKILL to
// everything in it), as a node lost to a power cut: no pod is told, no
// volume unmounted, no lease given back. The container and what it wrote
// stay, so StartNode brings the same node back. The API server learns of
// the loss only when the node's lease expires (WithNodeGracePeriod).
func (c *Cluster) KillNode(ctx context.Context, node string) error {
	if err := c.docker(ctx, "kill", "--signal", "KILL", node); err != nil {
		return fmt.Errorf("kindcluster: killing node %s: %w", node, err)
	}
	return nil
}

// StartNode starts a killed node's container again and waits until the
// node is Ready again (its kubelet has posted since the start) and its
// pods' CPU weight is set again (a restarted node's cgroups are new).
func (c *Cluster) StartNode(ctx context.Context, node string) error {
	t0 := time.Now()
	if err := c.docker(ctx, "start", node); err != nil {
		return fmt.Errorf("kindcluster: starting node %s: %w", node, err)
	}
	var last string
	for {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case readySince(n, t0):
			// The kubelet makes kubelet.slice when it starts, so it is
			// there to weigh once the node is Ready.
			if err := c.weighNode(ctx, node); err != nil {
				return err
			}
			c.logf("kindcluster: node %s Ready again %s after its start", node, time.Since(t0).Round(100*time.Millisecond))
			return nil
		default:
			last = "not Ready yet"
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kindcluster: node %s not Ready again after its start (%s): %w", node, last, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// NodeReadyCondition returns a node's Ready condition (status Unknown when
// it has none yet).
func NodeReadyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond
		}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}
}

// readySince reports whether the node is Ready by a heartbeat of its
// kubelet after t (a killed node's last status still says Ready until the
// controller marks it otherwise).
func readySince(n *corev1.Node, t time.Time) bool {
	cond := NodeReadyCondition(n)
	since := t.Truncate(time.Second)
	return cond.Status == corev1.ConditionTrue && (!cond.LastHeartbeatTime.Time.Before(since) || !cond.LastTransitionTime.Time.Before(since))
}

// docker runs a docker command about the cluster's nodes.
func (c *Cluster) docker(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, c.Toolchain.Docker, args...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, cmdout.Tail(out, 20))
	}
	return nil
}
