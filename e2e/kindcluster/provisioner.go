//go:build linux

package kindcluster

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

const (
	// StorageClassName is the cluster's default StorageClass, served by
	// the harness's provisioner.
	StorageClassName = "onprem-local"
	// ProvisionerName is the provisioner of StorageClassName.
	ProvisionerName = "onprem.dev/hostpath"
	// VolumeRoot is the folder inside the node containers that holds one
	// folder per provisioned volume.
	VolumeRoot = "/var/local-pv"

	annProvisionedBy   = "pv.kubernetes.io/provisioned-by"
	annSelectedNode    = "volume.kubernetes.io/selected-node"
	annIsDefaultClass  = "storageclass.kubernetes.io/is-default-class"
	provisionerResync  = 15 * time.Second
	provisionerWorkers = 2
)

// storageManifest is the node image's /kind/manifests/default-storage.yaml,
// which kind applies when it creates a cluster.
func storageManifest() string {
	return fmt.Sprintf(`apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: %s
  annotations:
    %s: "true"
provisioner: %s
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
`, StorageClassName, annIsDefaultClass, ProvisionerName)
}

// storageClass is the object of storageManifest, for clusters whose
// StorageClass went missing.
func storageClass() *storagev1.StorageClass {
	reclaim := corev1.PersistentVolumeReclaimDelete
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClassName, Annotations: map[string]string{annIsDefaultClass: "true"}},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &mode,
	}
}

// provisioner is the cluster's dynamic volume provisioner. It runs inside
// the test process: for each pending claim of a StorageClass whose
// provisioner is ProvisionerName (once the scheduler has picked a node,
// for WaitForFirstConsumer), it makes a world-writable folder under
// VolumeRoot in that node's container and creates a hostPath
// PersistentVolume pinned to the node and pre-bound to the claim; the PV
// controller then binds the pair. Released volumes whose reclaim policy is
// Delete lose their folder and their PV.
type provisioner struct {
	client kubernetes.Interface
	// nodeExec runs a command in a node's container.
	nodeExec func(ctx context.Context, node string, args ...string) error
	logf     func(string, ...any)

	queue  workqueue.TypedRateLimitingInterface[string]
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func startProvisioner(client kubernetes.Interface, nodeExec func(context.Context, string, ...string) error, logf func(string, ...any)) *provisioner {
	ctx, cancel := context.WithCancel(context.Background())
	p := &provisioner{
		client:   client,
		nodeExec: nodeExec,
		logf:     logf,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		cancel:   cancel,
	}
	factory := informers.NewSharedInformerFactory(client, provisionerResync)
	pvcs := factory.Core().V1().PersistentVolumeClaims()
	pvs := factory.Core().V1().PersistentVolumes()
	enqueue := func(prefix string) cache.ResourceEventHandlerFuncs {
		add := func(obj any) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				p.queue.Add(prefix + key)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }}
	}
	_, _ = pvcs.Informer().AddEventHandler(enqueue("pvc:"))
	_, _ = pvs.Informer().AddEventHandler(enqueue("pv:"))
	factory.Start(ctx.Done())
	p.done.Add(provisionerWorkers)
	for range provisionerWorkers {
		go func() {
			defer p.done.Done()
			for p.work(ctx, pvcs.Lister(), pvs.Lister()) {
			}
		}()
	}
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
		factory.Shutdown()
	}()
	return p
}

// stop ends the provisioner and waits for its workers.
func (p *provisioner) stop() {
	p.cancel()
	p.done.Wait()
}

func (p *provisioner) work(ctx context.Context, pvcs corelisters.PersistentVolumeClaimLister, pvs corelisters.PersistentVolumeLister) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	var err error
	switch {
	case len(key) > 4 && key[:4] == "pvc:":
		ns, name, _ := cache.SplitMetaNamespaceKey(key[4:])
		var pvc *corev1.PersistentVolumeClaim
		if pvc, err = pvcs.PersistentVolumeClaims(ns).Get(name); err == nil {
			err = p.provision(ctx, pvc)
		} else if apierrors.IsNotFound(err) {
			err = nil
		}
	case len(key) > 3 && key[:3] == "pv:":
		var pv *corev1.PersistentVolume
		if pv, err = pvs.Get(key[3:]); err == nil {
			err = p.reclaim(ctx, pv)
		} else if apierrors.IsNotFound(err) {
			err = nil
		}
	}
	if err != nil && ctx.Err() == nil {
		p.logf("kindcluster: provisioner: %s: %v (retrying)", key, err)
		p.queue.AddRateLimited(key)
		return true
	}
	p.queue.Forget(key)
	return true
}

func pvName(pvc *corev1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

func (p *provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil ||
		pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return nil
	}
	sc, err := p.client.StorageV1().StorageClasses().Get(ctx, *pvc.Spec.StorageClassName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get StorageClass: %w", err)
	}
	if sc.Provisioner != ProvisionerName {
		return nil
	}
	node := pvc.Annotations[annSelectedNode]
	if node == "" {
		if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
			return nil // the scheduler picks the node when a pod uses the claim
		}
		nodes, err := p.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		if len(nodes.Items) == 0 {
			return fmt.Errorf("no node to put the volume on")
		}
		node = nodes.Items[0].Name
	}
	name := pvName(pvc)
	if _, err := p.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		return nil // made already; the PV controller binds it
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get PV %s: %w", name, err)
	}
	dir := path.Join(VolumeRoot, name)
	if err := p.nodeExec(ctx, node, "mkdir", "-p", "-m", "0777", dir); err != nil {
		return fmt.Errorf("make %s on node %s: %w", dir, node, err)
	}
	if err := p.nodeExec(ctx, node, "chmod", "0777", dir); err != nil {
		return fmt.Errorf("chmod %s on node %s: %w", dir, node, err)
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if sc.ReclaimPolicy != nil {
		reclaim = *sc.ReclaimPolicy
	}
	hostPathType := corev1.HostPathDirectoryOrCreate
	storage, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return fmt.Errorf("claim requests no storage")
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{annProvisionedBy: ProvisionerName},
			Labels:      map[string]string{"onprem.dev/provisioner": "hostpath"},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: storage},
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    pvc.Spec.VolumeMode,
			StorageClassName:              sc.Name,
			PersistentVolumeReclaimPolicy: reclaim,
			MountOptions:                  sc.MountOptions,
			ClaimRef: &corev1.ObjectReference{
				APIVersion: "v1", Kind: "PersistentVolumeClaim",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion,
			},
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
	if _, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PV %s: %w", name, err)
	}
	p.logf("kindcluster: provisioner: %s for claim %s/%s on node %s (%s)", name, pvc.Namespace, pvc.Name, node, dir)
	return nil
}

// reclaim deletes a released volume of this provisioner whose policy is
// Delete: its folder on the node, then the PV.
func (p *provisioner) reclaim(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Annotations[annProvisionedBy] != ProvisionerName || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.DeletionTimestamp != nil {
		return nil
	}
	if pv.Spec.HostPath != nil && path.Dir(pv.Spec.HostPath.Path) == VolumeRoot && pv.Spec.NodeAffinity != nil &&
		pv.Spec.NodeAffinity.Required != nil {
		for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == corev1.LabelHostname && len(e.Values) == 1 {
					if err := p.nodeExec(ctx, e.Values[0], "rm", "-rf", pv.Spec.HostPath.Path); err != nil {
						return fmt.Errorf("remove %s on node %s: %w", pv.Spec.HostPath.Path, e.Values[0], err)
					}
				}
			}
		}
	}
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete PV %s: %w", pv.Name, err)
	}
	p.logf("kindcluster: provisioner: deleted released %s", pv.Name)
	return nil
}
