//go:build linux

package images

import v1 "github.com/google/go-containerregistry/pkg/v1"

// GitopsRuntime is the name of the GitOps runtime's stand-in image: one
// image for every container of the real gitops-runtime chart
// (cmd/gitops-standin), which the kind e2e tags as each image the chart
// renders. The platform's own images do not need it (make demo leaves it
// out).
const GitopsRuntime = "gitops-runtime"

// GitopsRuntimeRef is its reference before it is tagged as the chart's
// images.
const GitopsRuntimeRef = "onprem.dev/e2e/gitops-runtime:dev"

const gitopsStandIn = mainModule + "/e2e/images/cmd/gitops-standin"

// gitopsImage: Debian with what the chart's hook Jobs run in their shell
// scripts (kubectl, curl, jq, and the coreutils of the base), the
// stand-in as the entrypoint, and links to it under every command the
// chart's containers name instead of the image's entrypoint: Argo CD's
// argocd (the redis-initial-password hook, and the binary the dex and
// repo-server init containers copy), the installer's cf, Argo
// Workflows' workflow-controller, sealed-secrets' controller, the GitOps
// operator's /manager and app-proxy's ./init.sh (the working folder is
// /app). Every pod of the chart sets runAsNonRoot, most without a user:
// the image's user is numeric (999).
var gitopsImage = debianSpec{
	name:       GitopsRuntime,
	packages:   []string{"curl", "jq", "kubernetes-client"},
	user:       "argocd",
	home:       "/home/argocd",
	entrypoint: gitopsStandIn,
	files: []file{
		{path: "/app", dir: true, mode: 0o755},
		{path: "/app/init.sh", link: entrypointPath},
		{path: "/manager", link: entrypointPath},
		{path: "/usr/local/bin/argocd", link: entrypointPath},
		{path: "/usr/local/bin/cf", link: entrypointPath},
		{path: "/usr/local/bin/controller", link: entrypointPath},
		{path: "/usr/local/bin/workflow-controller", link: entrypointPath},
	},
	config: v1.Config{
		Entrypoint:   []string{"docker-entrypoint.sh"},
		Env:          []string{"PATH=" + basePath, "LANG=C.UTF-8", "HOME=/home/argocd"},
		User:         "999:999",
		WorkingDir:   "/app",
		ExposedPorts: ports(8080),
	},
}
