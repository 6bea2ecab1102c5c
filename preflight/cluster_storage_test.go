package preflight

import (
	"context"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
)

func TestStorage(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	envFor := clusterEnv(t, c)
	ctx := context.Background()

	t.Run("the default class", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, storageCheck(), envFor(clusterBaseSpec)), Pass,
			"4 volumes will use "+testcluster.StorageClassName, "provisioner kwok.x-k8s.io/volume", "volumeBindingMode Immediate")
	})
	t.Run("a configured class that does not exist", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, storageCheck(), envFor(clusterBaseSpec+"  storage:\n    className: fast\n")), Fail,
			"StorageClass fast (from spec.storage.className) does not exist", "StatefulSet/mongodb", "StorageClasses: "+testcluster.StorageClassName)
		clusterExpect(t, clusterRun(t, storageCheck(), envFor(clusterBaseSpec+"  databases:\n    redis:\n      persistence:\n        storageClass: nvme\n")), Fail,
			"StorageClass nvme (from spec.databases.redis.persistence.storageClass) does not exist")
	})
	wait := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "csi.example.com", VolumeBindingMode: &wait,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("a configured class with WaitForFirstConsumer", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, storageCheck(), envFor(clusterBaseSpec+"  storage:\n    className: fast\n")), Pass,
			"provisioner csi.example.com", "WaitForFirstConsumer", "normal")
	})
	if err := c.Client.StorageV1().StorageClasses().Delete(ctx, testcluster.StorageClassName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("no default class", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, storageCheck(), envFor(clusterBaseSpec)), Fail,
			"4 volumes name no StorageClass", "no default StorageClass", "StorageClasses: fast", "is-default-class")
	})
	if err := c.Client.StorageV1().StorageClasses().Delete(ctx, "fast", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("no class at all", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, storageCheck(), envFor(clusterBaseSpec)), Fail, "no StorageClass at all", "install a storage provisioner")
	})
}
