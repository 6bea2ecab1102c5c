package chartfetch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"

	"onprem.dev/onprem/charts"
)

// Resolve returns the chart of src from local, a chart tree laid out like
// charts.FS (one folder per chart name: a bundle's charts), when it holds
// the chart at src.Version; otherwise (local nil, no such folder, another
// version) it fetches it (Fetch). The local tree is trusted as it is (a
// bundle's checksums cover it): the digest pins the archive, which the
// tree does not keep. A local copy that does not load is an error rather
// than a reason to go to the network.
func Resolve(ctx context.Context, src Source, local fs.FS, o Options) (*chartv2.Chart, error) {
	if _, err := src.check(); err != nil {
		return nil, err
	}
	if local != nil {
		_, err := fs.Stat(local, path.Join(src.Chart, "Chart.yaml"))
		switch {
		case err == nil:
			ch, err := charts.LoadFrom(local, src.Chart)
			if err != nil {
				return nil, fmt.Errorf("the local copy of chart %s (in a bundle: run 'onprem bundle verify'): %w: %w", src.Chart, ErrInvalidChart, err)
			}
			if ch.Metadata.Name != src.Chart {
				return nil, fmt.Errorf("the local copy of chart %s holds chart %s: %w", src.Chart, ch.Metadata.Name, ErrWrongChart)
			}
			if ch.Metadata.Version == src.Version {
				slog.Debug("chartfetch: from the local chart tree", "chart", src.Chart, "version", src.Version)
				return ch, nil
			}
			slog.Info("chartfetch: the local chart tree holds another version; fetching", "chart", src.Chart, "local", ch.Metadata.Version, "want", src.Version)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("looking for chart %s in the local chart tree: %w", src.Chart, err)
		}
	}
	a, err := Fetch(ctx, src, o)
	if err != nil {
		return nil, err
	}
	return a.Chart, nil
}
