package action

import (
	"context"
	"errors"
	"testing"

	"onprem.dev/onprem/installer/config"
)

// TestUpgradeRefusesOneAttachmentsFlagsForMany: the flags that reach one
// attachment's cluster (and a runtime's new tokens) are refused with more
// than one name or --all, before anything is read, naming every such flag
// of the kind.
func TestUpgradeRefusesOneAttachmentsFlagsForMany(t *testing.T) {
	ctx := context.Background()
	edge := config.ClusterRef{Context: "edge"}
	for _, c := range []struct {
		name string
		run  func() error
		want string
	}{
		{"runner, two names", func() error {
			_, err := (&RunnerUpgrade{AttachmentUpgrade: AttachmentUpgrade{Names: []string{"a", "b"}}, RunnerCluster: edge}).Run(ctx)
			return err
		}, "--runner-kubeconfig and --runner-context apply to one runner: upgrade the others on their own"},
		{"runner, --all", func() error {
			_, err := (&RunnerUpgrade{AttachmentUpgrade: AttachmentUpgrade{All: true}, RunnerCluster: edge}).Run(ctx)
			return err
		}, "--runner-kubeconfig and --runner-context apply to one runner: upgrade the others on their own"},
		{"runtime, cluster", func() error {
			_, err := (&RuntimeUpgrade{AttachmentUpgrade: AttachmentUpgrade{All: true}, RuntimeCluster: edge}).Run(ctx)
			return err
		}, "--runtime-kubeconfig, --runtime-context, --git-token-file and --platform-token-file apply to one runtime: upgrade the others on their own"},
		{"runtime, token file", func() error {
			_, err := (&RuntimeUpgrade{AttachmentUpgrade: AttachmentUpgrade{Names: []string{"a", "b"}}, TokenFile: "token.txt"}).Run(ctx)
			return err
		}, "--runtime-kubeconfig, --runtime-context, --git-token-file and --platform-token-file apply to one runtime: upgrade the others on their own"},
	} {
		err := c.run()
		var ie *InputError
		if !errors.As(err, &ie) || err.Error() != c.want {
			t.Errorf("%s: got %v, want the input error %q", c.name, err, c.want)
		}
	}
}
