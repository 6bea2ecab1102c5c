//go:build linux

package kindcluster

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"

	"onprem.dev/onprem/e2e/internal/cmdout"
)

// NetworkName is the docker network kind puts its node containers on.
const NetworkName = "kind"

// HostIP returns this machine's address on kind's docker network (the
// network's gateway): where the nodes reach a server the test runs, such
// as a registry listening on that address.
func (c *Cluster) HostIP(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, c.Toolchain.Docker, "network", "inspect", NetworkName,
		"--format", "{{range .IPAM.Config}}{{.Gateway}} {{end}}").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kindcluster: docker network inspect %s: %w: %s", NetworkName, err, cmdout.Tail(out, 5))
	}
	for _, f := range strings.Fields(string(out)) {
		if ip := net.ParseIP(f); ip != nil && ip.To4() != nil {
			return f, nil
		}
	}
	return "", fmt.Errorf("kindcluster: the docker network %s has no IPv4 gateway (got %q)", NetworkName, strings.TrimSpace(string(out)))
}

// NodeIP returns the IPv4 address of a node container on kind's network:
// where this machine reaches the node's NodePorts.
func (c *Cluster) NodeIP(ctx context.Context, node string) (string, error) {
	out, err := exec.CommandContext(ctx, c.Toolchain.Docker, "inspect", node,
		"--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kindcluster: docker inspect %s: %w: %s", node, err, cmdout.Tail(out, 5))
	}
	for _, f := range strings.Fields(string(out)) {
		if ip := net.ParseIP(f); ip != nil && ip.To4() != nil {
			return f, nil
		}
	}
	return "", fmt.Errorf("kindcluster: node %s has no IPv4 address (got %q)", node, strings.TrimSpace(string(out)))
}

// TrustRegistry lets every node's containerd pull from the plain-HTTP
// registry at host (HOST:PORT): a hosts.toml under
// /etc/containerd/certs.d/HOST:PORT, which containerd reads on each pull
// (kindConfig points containerd there). Without it containerd speaks
// HTTPS to every registry.
func (c *Cluster) TrustRegistry(ctx context.Context, host string) error {
	if _, _, err := net.SplitHostPort(host); err != nil {
		return fmt.Errorf("kindcluster: registry %q must be HOST:PORT: %w", host, err)
	}
	hosts := registryHostsTOML(host)
	dir := "/etc/containerd/certs.d/" + host
	for _, node := range c.Nodes {
		if _, err := c.NodeExec(ctx, node, strings.NewReader(hosts), "sh", "-c",
			"mkdir -p '"+dir+"' && cat > '"+dir+"/hosts.toml'"); err != nil {
			return fmt.Errorf("kindcluster: trusting registry %s on %s: %w", host, node, err)
		}
	}
	c.logf("kindcluster: nodes pull from http://%s", host)
	return nil
}

// registryHostsTOML is containerd's hosts.toml for a plain-HTTP registry.
func registryHostsTOML(host string) string {
	return fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", host, host)
}
