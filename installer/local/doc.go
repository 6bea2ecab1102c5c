// Package local runs the platform on the operator's own machine: Up creates
// a kind cluster (with kind's Go library, nodes as docker containers) and
// installs the platform into it with installer/action; Down deletes it.
//
// The cluster has one control-plane node. Its container maps host ports
// (default 127.0.0.1:8080 and 127.0.0.1:8443) to the ingress controller's
// fixed node ports (HTTPNodePort, HTTPSNodePort), and the installation
// serves the ingress as a NodePort Service on exactly those ports, so the
// platform answers at https://DOMAIN:8443 on this machine. The default
// domain, onprem.localhost, is a *.localhost name: browsers and curl
// resolve it to the loopback address by themselves.
//
// Up writes two files in Dir (default ~/.onprem/local): NAME.kubeconfig,
// the cluster's admin kubeconfig (the operator's ~/.kube/config is never
// touched), and, when no configuration file is given, NAME.yaml, the
// onprem.yaml it installed, for later 'onprem install', 'upgrade' and
// 'status' commands. Down removes both with the cluster.
//
// On a machine with a registry, kind's default node image and the
// upstream images are pulled as usual. With no registry, ImageArchives
// (docker-archive tarballs) are loaded into every node's containerd before
// the install, and NodeImage names a node image already in the local
// docker; 'make demo' builds both offline (see e2e/localdemo).
package local
