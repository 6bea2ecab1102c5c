package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/state"
)

// OverlaysKey holds the operator's overlay folders (spec.overlays) as a
// tar, beside ConfigKey: a restore on another machine has them too.
const OverlaysKey = "overlays.tar"

// maxOverlayBytes bounds the overlays kept in the cluster (a Secret holds
// at most 1 MiB).
const maxOverlayBytes = 512 << 10

// PackConfig returns the Secret data that keeps an effective configuration:
// onprem.yaml, with each overlay folder renamed overlays/overlay-N and its
// files in OverlaysKey.
func PackConfig(in *config.Installation) (map[string][]byte, error) {
	cp := *in
	cp.Spec.Overlays = nil
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for i, dir := range in.Spec.Overlays {
		rel := fmt.Sprintf("overlays/overlay-%d", i)
		cp.Spec.Overlays = append(cp.Spec.Overlays, rel)
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !d.Type().IsRegular() {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			r, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Name: rel + "/" + filepath.ToSlash(r), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("keeping overlay folder %s (spec.overlays[%d]): %w", dir, i, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if tarBuf.Len() > maxOverlayBytes {
		return nil, fmt.Errorf("the overlay folders (spec.overlays) hold %d KiB; onprem keeps at most %d KiB of them in the cluster for backups: keep only kustomizations and patches there", tarBuf.Len()>>10, maxOverlayBytes>>10)
	}
	y, err := yaml.Marshal(&cp)
	if err != nil {
		return nil, fmt.Errorf("encoding the configuration: %w", err)
	}
	out := map[string][]byte{ConfigKey: y}
	if len(in.Spec.Overlays) > 0 {
		out[OverlaysKey] = tarBuf.Bytes()
	}
	return out, nil
}

// GeneratedSecretsAnnotation on ConfigSecret lists, comma separated, the
// Secrets the installer generates for the configuration: a backup that may
// not list Secrets (the scheduled one, whose Role names each Secret it may
// read) gets them one by one.
const GeneratedSecretsAnnotation = "onprem.dev/generated-secrets"

// ReferencedSecretsAnnotation on ConfigSecret lists the operator's own
// Secrets the configuration names (config.Installation.ReferencedSecrets):
// a backup carries them too, so that a restore on a new cluster needs
// nothing made by hand first.
const ReferencedSecretsAnnotation = "onprem.dev/referenced-secrets"

// StoreConfig keeps the effective configuration in the platform namespace
// (ConfigSecret), with the names of its generated Secrets, for backups.
func StoreConfig(ctx context.Context, c kubernetes.Interface, ns string, in *config.Installation, generated []string) error {
	data, err := PackConfig(in)
	if err != nil {
		return err
	}
	names := strings.Join(generated, ",")
	referenced := strings.Join(in.ReferencedSecrets(), ",")
	api := c.CoreV1().Secrets(ns)
	cur, err := api.Get(ctx, ConfigSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: ConfigSecret, Namespace: ns,
				Labels: map[string]string{state.ManagedByLabel: state.ManagedBy},
				Annotations: map[string]string{"onprem.dev/purpose": "the effective onprem.yaml of the last install or upgrade, for backups (no secret value)",
					GeneratedSecretsAnnotation: names, ReferencedSecretsAnnotation: referenced}},
			Type: corev1.SecretTypeOpaque, Data: data,
		}, metav1.CreateOptions{FieldManager: state.ManagedBy})
	} else if err == nil {
		if sameData(cur.Data, data) && cur.Annotations[GeneratedSecretsAnnotation] == names && cur.Annotations[ReferencedSecretsAnnotation] == referenced {
			return nil
		}
		upd := cur.DeepCopy()
		upd.Data = data
		if upd.Annotations == nil {
			upd.Annotations = map[string]string{}
		}
		upd.Annotations[GeneratedSecretsAnnotation] = names
		upd.Annotations[ReferencedSecretsAnnotation] = referenced
		_, err = api.Update(ctx, upd, metav1.UpdateOptions{FieldManager: state.ManagedBy})
	}
	if err != nil {
		return fmt.Errorf("keeping the configuration in Secret %s/%s: %w", ns, ConfigSecret, err)
	}
	return nil
}

// UnpackConfig writes a backup's configuration into dir (onprem.yaml and
// its overlay folders) and returns the path of onprem.yaml.
func UnpackConfig(dir string, data map[string][]byte) (string, error) {
	y, ok := data[ConfigKey]
	if !ok || len(y) == 0 {
		return "", errors.New("the backup holds no configuration")
	}
	if tr := data[OverlaysKey]; len(tr) > 0 {
		r := tar.NewReader(bytes.NewReader(tr))
		for {
			h, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return "", fmt.Errorf("the backup's overlay folders: %w", err)
			}
			name := filepath.FromSlash(h.Name)
			if !strings.HasPrefix(h.Name, "overlays/") || strings.Contains(h.Name, "..") || filepath.IsAbs(name) {
				return "", fmt.Errorf("the backup's overlay folders: unexpected file %q", h.Name)
			}
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return "", err
			}
			content, err := io.ReadAll(io.LimitReader(r, maxOverlayBytes))
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(p, content, 0o600); err != nil {
				return "", err
			}
		}
	}
	path := filepath.Join(dir, config.DefaultPath)
	if err := os.WriteFile(path, y, 0o600); err != nil {
		return "", err
	}
	return path, nil
}
