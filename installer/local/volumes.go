package local

import (
	"context"
	"fmt"
	"log/slog"
	"path"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The offline node image ('make demo', e2e/kindcluster) makes its default
// StorageClass provisioned by offlineProvisioner, which is served only by
// the e2e harness's process. kind's standard node image ships its own
// provisioner (local-path-provisioner) instead. When the cluster's default
// class is offlineProvisioner's, Up creates a pool of hostPath volumes of
// that class, which claims bind to with no provisioner at all: they keep
// working after onprem exits, as long as the pool lasts.
const (
	offlineProvisioner = "onprem.dev/hostpath"
	// volumeRoot holds the pool's folders inside the node containers.
	volumeRoot = "/var/local-pv"
	// poolSize is the number of volumes per node: the platform's four
	// databases, the legacy services, upgrade backups, and spare.
	poolSize = 12
	// poolCapacity is what each volume offers; hostPath volumes are not
	// limited, so it only has to cover the largest claim.
	poolCapacity = "1Ti"

	annDefaultClass = "storageclass.kubernetes.io/is-default-class"
	// labelPool marks the pool's volumes.
	labelPool = "onprem.dev/local-pool"
)

// nodeExec runs a command in a node's container.
type nodeExec func(ctx context.Context, node string, args ...string) error

// ensureVolumePool creates the volume pool on every node when the default
// StorageClass is offlineProvisioner's; it returns how many volumes it
// made (0: the cluster provisions its own volumes).
func ensureVolumePool(ctx context.Context, cs kubernetes.Interface, nodes []string, exec nodeExec, log *slog.Logger) (int, error) {
	classes, err := cs.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing StorageClasses: %w", err)
	}
	class := ""
	for _, sc := range classes.Items {
		if sc.Annotations[annDefaultClass] == "true" && sc.Provisioner == offlineProvisioner {
			class = sc.Name
		}
	}
	if class == "" {
		log.Debug("local: the cluster provisions its own volumes")
		return 0, nil
	}
	made := 0
	for _, node := range nodes {
		for i := 1; i <= poolSize; i++ {
			name := fmt.Sprintf("%s-%s-%02d", class, node, i)
			dir := path.Join(volumeRoot, name)
			// World-writable: the platform's pods run as non-root users,
			// and hostPath volumes ignore fsGroup.
			if err := exec(ctx, node, "mkdir", "-p", dir); err != nil {
				return made, fmt.Errorf("making %s on node %s: %w", dir, node, err)
			}
			if err := exec(ctx, node, "chmod", "0777", dir); err != nil {
				return made, fmt.Errorf("chmod %s on node %s: %w", dir, node, err)
			}
			_, err := cs.CoreV1().PersistentVolumes().Create(ctx, poolVolume(name, class, node, dir), metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return made, fmt.Errorf("creating PersistentVolume %s: %w", name, err)
			}
			made++
		}
	}
	log.Info("local: created a pool of volumes (the node image's StorageClass has no provisioner running in the cluster)",
		"storageClass", class, "volumes", made)
	return made, nil
}

// poolVolume is one hostPath volume of the pool, pinned to its node.
func poolVolume(name, class, node, dir string) *corev1.PersistentVolume {
	hostPathType := corev1.HostPathDirectoryOrCreate
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelPool: "true"}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName: class,
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(poolCapacity)},
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			// Retain: Kubernetes cannot delete a hostPath volume's data;
			// the folder goes with the cluster.
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostPathType},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}}}},
			}},
		},
	}
}
