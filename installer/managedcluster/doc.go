// Package managedcluster registers external clusters with a GitOps runtime
// (an Argo CD installation onprem installed): a ServiceAccount with least
// privilege on the external cluster, and an Argo CD cluster Secret in the
// runtime's namespace that holds the server, the CA and that
// ServiceAccount's token. List checks every registered cluster with those
// credentials; Remove cleans both sides.
//
// The functions take connected *kube.Cluster values: the caller connects
// (kube.Connect), so that an unreachable cluster is reported as a
// *kube.UnreachableError before anything is changed.
//
// # What Add creates
//
// On the external cluster, with server-side apply (field manager
// Options.FieldManager):
//
//	Namespace          onprem-managed                      app.kubernetes.io/managed-by=onprem
//	ServiceAccount     onprem-managed/argocd-manager-RUNTIME
//	Secret             onprem-managed/argocd-manager-RUNTIME-token  (kubernetes.io/service-account-token)
//	ClusterRole        onprem-argocd-manager-RUNTIME
//	ClusterRoleBinding onprem-argocd-manager-RUNTIME        (to the ServiceAccount)
//
// On the runtime's cluster, the Secret RUNTIME_NS/cluster-NAME with the
// labels argocd.argoproj.io/secret-type=cluster, onprem.dev/runtime=RUNTIME
// and onprem.dev/managed-cluster=NAME, and the keys Argo CD reads: name,
// server (the external cluster's API URL as its kubeconfig gives it) and
// config, the JSON of Argo CD's ClusterConfig:
//
//	{"bearerToken": "...", "tlsClientConfig": {"insecure": false, "caData": "<base64 PEM>"}}
//
// caData is the CA the kubeconfig trusts for that server (it has just
// verified the connection); when the kubeconfig skips verification, the
// cluster's own root CA that the token controller put in the token
// Secret (ca.crt); when the kubeconfig relies on the system's roots, none.
// Before the runtime's Secret is written, Add connects with exactly these
// credentials (GET /version and a SelfSubjectAccessReview), so a Secret that
// would not work is never written.
//
// The token is a kubernetes.io/service-account-token Secret filled by the
// cluster's token controller (Add waits for it, bounded by
// Options.Timeout). It is created once and kept: a second Add converges
// every object without issuing a new token, unless the token Secret or the
// ServiceAccount was deleted, in which case it issues a new one and the
// registration heals. The token is never printed, logged, put in an error
// or returned.
//
// A cluster is registered once per runtime (the registrations of one
// runtime on one cluster would share its ServiceAccount, and removing one
// would cut the other off), and a name once per runtime: Add refuses a name
// registered for another server, naming both servers.
//
// # What the ServiceAccount may do
//
// The ClusterRole onprem-argocd-manager-RUNTIME has three parts.
//
// Read. list and watch on every resource of every API group, custom ones
// included: Argo CD watches the whole cluster to diff and to report health,
// and its cluster cache fails when a kind cannot be listed. get is granted
// on every top-level resource the cluster serves when Add runs (read from
// its discovery), and on pods/log for Argo CD's log view. get is not
// granted with a wildcard, because get on a subresource is not a read:
// get nodes/proxy reaches every kubelet's exec and run endpoints, get
// pods/exec, pods/attach and pods/portforward open streams into containers
// on clusters that still authorize WebSocket upgrades by get, and get
// services/proxy and pods/proxy relay requests into the cluster network.
// get on top-level objects adds nothing list does not already show. A
// custom kind installed after Add is listed and watched; get on it
// (Argo CD's live manifest view) needs another Add, which converges the
// ClusterRole.
//
// Write (get, create, update, patch, delete) only on the kinds a GitOps
// deployment applies: Deployments, StatefulSets, DaemonSets, ReplicaSets,
// Pods, Services, ConfigMaps, Secrets, ServiceAccounts,
// PersistentVolumeClaims, Namespaces, Jobs, CronJobs, Ingresses,
// NetworkPolicies, HorizontalPodAutoscalers, PodDisruptionBudgets, and
// namespaced Roles and RoleBindings.
//
// Never: the escalate, bind or impersonate verbs; writes to Nodes,
// PersistentVolumes, StorageClasses, CustomResourceDefinitions,
// ClusterRoles, ClusterRoleBindings, admission webhook configurations or
// API services; subresources such as pods/exec, nodes/proxy or
// serviceaccounts/token. An application that needs cluster-scoped objects
// or custom resources has them installed by the cluster's operators, not
// by Git. The Roles and RoleBindings it writes cannot grant more than it
// holds: without escalate and bind the API server refuses any rule or
// binding beyond its own permissions.
//
// What this cannot prevent: whoever may create Pods (or workloads) or
// token Secrets in a namespace may act as that namespace's ServiceAccounts,
// and the write rules apply in every namespace, kube-system included. The
// cluster Secret must therefore be protected like an administrator's
// credential of the external cluster; a cluster that must confine its
// deployer further needs an admission policy (for example a
// ValidatingAdmissionPolicy refusing this ServiceAccount's writes in
// kube-system).
package managedcluster
