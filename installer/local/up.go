package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sethvargo/go-envconfig"
	"sigs.k8s.io/kind/pkg/apis/config/defaults"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/preflight"
)

// Defaults of Up.
const (
	DefaultName          = "onprem"
	DefaultHTTPPort      = 8080
	DefaultHTTPSPort     = 8443
	DefaultListenAddress = "127.0.0.1"
	// DefaultWait bounds the kind cluster's creation, until its
	// control-plane node is Ready.
	DefaultWait = 5 * time.Minute
)

// Ports says where the platform is served on this machine.
type Ports struct {
	// HTTP and HTTPS are the host ports mapped to the ingress's node ports.
	HTTP, HTTPS int
	// ListenAddress is the host address they listen on (127.0.0.1: only
	// this machine; 0.0.0.0: every interface).
	ListenAddress string
}

// Up creates a local kind cluster and installs the platform into it.
type Up struct {
	// Name is the kind cluster's name (DefaultName when empty); kind names
	// the node container NAME-control-plane.
	Name string
	// NodeImage is the kind node image; empty: kind's default for its
	// version (kindest/node, pulled from Docker Hub).
	NodeImage string
	// ImageArchives are docker-archive tarballs ('docker save') loaded into
	// every node's containerd before the install: the images of a machine
	// with no registry.
	ImageArchives []string
	// ConfigPath is the operator's onprem.yaml. Empty: Up writes one in
	// Dir (NAME.yaml): the newest embedded release, DefaultDomain.
	ConfigPath string
	// Overrides are flags over the configuration (version, domain, ...).
	Overrides config.Overrides
	// Lookup reads ONPREM_* variables (default: the process environment).
	Lookup envconfig.Lookuper
	// KindConfig is a kind v1alpha4 Cluster configuration to start from;
	// Up adds its port mappings to the first control-plane node.
	KindConfig string
	// Ports are the host ports (DefaultHTTPPort, DefaultHTTPSPort on
	// DefaultListenAddress when zero).
	Ports Ports
	// Wait bounds the cluster's creation (DefaultWait when zero).
	Wait time.Duration
	// Timeout bounds each component's install (apply's default when zero).
	Timeout time.Duration
	// SkipChecks are preflight checks not to run.
	SkipChecks []string
	// Dir holds the kubeconfig and the written onprem.yaml (DefaultDir()
	// when empty).
	Dir string
	// Reporter receives the install's progress (may be nil).
	Reporter apply.Reporter
	// Preflight receives the preflight report (may be nil).
	Preflight func(*preflight.Report)
	// Log receives progress (slog.Default() when nil).
	Log *slog.Logger

	// connect is the docker check and kind provider (a seam for tests).
	connect connectFunc
}

// UpResult is what Up made, and how to reach it.
type UpResult struct {
	Cluster    string `json:"cluster"`
	NodeImage  string `json:"nodeImage"`
	Kubeconfig string `json:"kubeconfig"`
	// Config is the onprem.yaml installed; Generated says Up wrote it.
	Config    string `json:"config"`
	Generated bool   `json:"generatedConfig,omitempty"`
	Namespace string `json:"namespace"`
	Version   string `json:"version"`
	Domain    string `json:"domain"`
	// URL is the platform's address (HTTPS); HTTPURL the plain one.
	URL     string `json:"url"`
	HTTPURL string `json:"httpURL"`
	// Reach says how to get there from this machine, one line each.
	Reach []string `json:"reach"`
	// Next are commands to go on with.
	Next    []string              `json:"next"`
	Install *action.InstallResult `json:"install,omitempty"`
	Elapsed time.Duration         `json:"elapsed"`
}

// ExistsError: a kind cluster of that name exists already.
type ExistsError struct{ Name string }

func (e *ExistsError) Error() string {
	flag := ""
	if e.Name != DefaultName {
		flag = " --name " + e.Name
	}
	return fmt.Sprintf("--name %s: a kind cluster named %q exists already: remove it with 'onprem local down%s', or give this one another name with --name",
		e.Name, e.Name, flag)
}

// validName is what kind accepts as a cluster name, kept to a DNS label.
var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,48}[a-z0-9])?$`)

// DefaultDir is where Up writes its files: ~/.onprem/local.
func DefaultDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the home folder for ~/.onprem/local: %w", err)
	}
	return filepath.Join(home, ".onprem", "local"), nil
}

// Paths returns the kubeconfig and configuration files of cluster name in
// dir.
func Paths(dir, name string) (kubeconfig, onpremYAML string) {
	return filepath.Join(dir, name+".kubeconfig"), filepath.Join(dir, name+".yaml")
}

// defaults fills what is empty and checks what the operator gave, before
// anything is touched.
func (u *Up) defaults() error {
	// Every bad input is reported at once, as 'config validate' does.
	var problems []error
	bad := func(format string, a ...any) { problems = append(problems, fmt.Errorf(format, a...)) }
	if u.Name == "" {
		u.Name = DefaultName
	}
	if !validName.MatchString(u.Name) {
		bad("--name %q: use lower-case letters, digits and '-', starting and ending with a letter or digit, at most 50 characters", u.Name)
	}
	if u.Ports.HTTP == 0 {
		u.Ports.HTTP = DefaultHTTPPort
	}
	if u.Ports.HTTPS == 0 {
		u.Ports.HTTPS = DefaultHTTPSPort
	}
	if u.Ports.ListenAddress == "" {
		u.Ports.ListenAddress = DefaultListenAddress
	}
	for _, p := range []struct {
		flag string
		v    int
	}{{"--http-port", u.Ports.HTTP}, {"--https-port", u.Ports.HTTPS}} {
		if p.v < 1 || p.v > 65535 {
			bad("%s %d: a port is between 1 and 65535", p.flag, p.v)
		}
	}
	if u.Ports.HTTP == u.Ports.HTTPS {
		bad("--http-port and --https-port are both %d: give two different ports", u.Ports.HTTP)
	}
	if net.ParseIP(u.Ports.ListenAddress) == nil {
		bad("--listen-address %q: not an IP address; use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)", u.Ports.ListenAddress)
	}
	if u.Wait <= 0 {
		u.Wait = DefaultWait
	}
	for _, a := range u.ImageArchives {
		fi, err := os.Stat(a)
		if err != nil {
			bad("--image-archive %s: %w (make one with 'docker save -o FILE IMAGE...', or run 'make demo')", a, err)
		} else if !fi.Mode().IsRegular() {
			bad("--image-archive %s: not a file: give a docker-archive tarball ('docker save -o FILE IMAGE...')", a)
		}
	}
	if u.ConfigPath != "" {
		if _, err := os.Stat(u.ConfigPath); err != nil {
			bad("--config %s: %w (leave --config out to install a default configuration; 'onprem config init' writes a starter file)", u.ConfigPath, err)
		}
	} else if u.Overrides.Version != nil {
		// Without a file the version is only this flag's: check it now,
		// not after the ports.
		rels, err := release.Embedded()
		if err != nil {
			return err
		}
		if _, err := rels.Get(*u.Overrides.Version); err != nil {
			bad("--platform-version: %w", err)
		}
	}
	if len(problems) > 0 {
		return inputErr(errors.Join(problems...))
	}
	if u.Dir == "" {
		d, err := DefaultDir()
		if err != nil {
			return err
		}
		u.Dir = d
	}
	if u.Log == nil {
		u.Log = slog.Default()
	}
	if u.connect == nil {
		u.connect = connectKind
	}
	return nil
}

// Run creates the cluster and installs the platform. When the cluster was
// created but the install failed, the cluster is left for inspection and
// a re-run of 'onprem install' (the error says how), and the result says
// where it is.
func (u *Up) Run(ctx context.Context) (*UpResult, error) {
	start := time.Now()
	if err := u.defaults(); err != nil {
		return nil, err
	}
	var base *v1alpha4.Cluster
	if u.KindConfig != "" {
		var err error
		if base, err = readKindConfig(u.KindConfig); err != nil {
			return nil, err
		}
	}
	// The configuration is checked before anything is made.
	src := action.Source{ConfigPath: u.ConfigPath, Overrides: u.Overrides, Lookup: lookup(u.Lookup)}
	if u.ConfigPath != "" {
		diffs, err := checkServing(ctx, action.Source{ConfigPath: u.ConfigPath, Overrides: u.Overrides, Lookup: u.Lookup})
		if err != nil {
			return nil, err
		}
		if len(diffs) > 0 {
			u.Log.Warn("local: serving the ingress on the ports mapped to this machine, over "+u.ConfigPath+
				"; add these settings to it, or a later 'onprem install -c "+u.ConfigPath+"' will undo them", "settings", strings.Join(diffs, "; "))
		}
	}

	prov, cgroupV1, err := u.connect(ctx, u.Log)
	if err != nil {
		return nil, err
	}
	existing, err := prov.List()
	if err != nil {
		return nil, fmt.Errorf("listing kind clusters: %w", err)
	}
	if slices.Contains(existing, u.Name) {
		return nil, inputErr(&ExistsError{Name: u.Name})
	}
	if err := portsFree(u.Ports); err != nil {
		return nil, err
	}
	kcfg, err := kindConfig(base, u.Name, u.Ports, cgroupV1)
	if err != nil {
		return nil, err
	}

	if err := os.MkdirAll(u.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("making %s for the kubeconfig: %w", u.Dir, err)
	}
	kubeconfig, generated := Paths(u.Dir, u.Name)
	// A kubeconfig left by a cluster of that name that is gone.
	if err := os.Remove(kubeconfig); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the stale kubeconfig %s: %w", kubeconfig, err)
	}
	res := &UpResult{Cluster: u.Name, Kubeconfig: kubeconfig, Config: u.ConfigPath, NodeImage: u.NodeImage}
	if res.NodeImage == "" {
		res.NodeImage = defaults.Image
	}
	if u.ConfigPath == "" {
		g, err := u.generate(kubeconfig, generated)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(generated, g.yaml(), 0o600); err != nil {
			return nil, fmt.Errorf("writing the installation's configuration: %w", err)
		}
		src.ConfigPath, res.Config, res.Generated = generated, generated, true
	}
	l, err := src.Load(ctx)
	if err != nil {
		if res.Generated {
			_ = os.Remove(generated)
		}
		return nil, err
	}
	in := l.Installation
	l.Close()
	res.Namespace, res.Version, res.Domain = in.Spec.Namespace, in.Spec.Version, in.Spec.Domain
	res.URL, res.HTTPURL = serveURL("https", in.Spec.Domain, u.Ports.HTTPS), serveURL("http", in.Spec.Domain, u.Ports.HTTP)
	res.Reach = reach(in.Spec.Domain, u.Ports, in.Spec.TLS.Mode == config.TLSModeSelfSigned)
	res.Next = next(u.Name, kubeconfig, res.Config)

	// The cluster.
	t0 := time.Now()
	u.Log.Info("local: creating the kind cluster", "name", u.Name, "nodeImage", res.NodeImage,
		"ports", fmt.Sprintf("%s:%d->%d, %s:%d->%d", u.Ports.ListenAddress, u.Ports.HTTP, HTTPNodePort, u.Ports.ListenAddress, u.Ports.HTTPS, HTTPSNodePort))
	opts := []cluster.CreateOption{
		cluster.CreateWithV1Alpha4Config(kcfg),
		cluster.CreateWithKubeconfigPath(kubeconfig),
		cluster.CreateWithWaitForReady(u.Wait),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false),
	}
	if u.NodeImage != "" {
		opts = append(opts, cluster.CreateWithNodeImage(u.NodeImage))
	}
	if err := prov.Create(u.Name, opts...); err != nil {
		if res.Generated {
			_ = os.Remove(generated)
		}
		_ = os.Remove(kubeconfig)
		return nil, fmt.Errorf("creating the kind cluster %s from %s: %w", u.Name, res.NodeImage, err)
	}
	u.Log.Info("local: cluster created", "name", u.Name, "kubeconfig", kubeconfig, "elapsed", time.Since(t0).Round(100*time.Millisecond))
	left := func(err error) error {
		return fmt.Errorf("%w\nThe cluster %s is left as it is (KUBECONFIG=%s). See what is installed, finish the install, or remove the cluster:\n"+
			"  onprem status --kubeconfig %s\n"+
			"  onprem install -c %s --kubeconfig %s\n"+
			"  onprem local down%s",
			err, u.Name, kubeconfig, kubeconfig, res.Config, kubeconfig, nameFlag(u.Name))
	}
	if err := ctx.Err(); err != nil {
		return res, left(err)
	}

	nodeList, err := prov.ListInternalNodes(u.Name)
	if err != nil {
		return res, left(fmt.Errorf("listing the nodes of %s: %w", u.Name, err))
	}
	if err := u.loadArchives(ctx, nodeList); err != nil {
		return res, left(err)
	}
	cl, err := kube.Connect(ctx, kube.Options{Kubeconfig: kubeconfig})
	if err != nil {
		return res, left(err)
	}
	names := make([]string, 0, len(nodeList))
	byName := map[string]nodes.Node{}
	for _, n := range nodeList {
		names = append(names, n.String())
		byName[n.String()] = n
	}
	exec := func(ctx context.Context, node string, args ...string) error {
		n, ok := byName[node]
		if !ok {
			return fmt.Errorf("no node %s", node)
		}
		return n.CommandContext(ctx, args[0], args[1:]...).Run()
	}
	if _, err := ensureVolumePool(ctx, cl.Client, names, exec, u.Log); err != nil {
		return res, left(err)
	}

	// The platform.
	u.Log.Info("local: installing the platform", "version", res.Version, "namespace", res.Namespace, "config", res.Config)
	inst := &action.Install{
		Source:     src,
		Cluster:    kube.Options{Kubeconfig: kubeconfig},
		Set:        nodePortSets(),
		Timeout:    u.Timeout,
		SkipChecks: u.SkipChecks,
		Reporter:   u.Reporter,
		Preflight:  u.Preflight,
	}
	ir, err := inst.Run(ctx)
	res.Install = ir
	res.Elapsed = time.Since(start)
	if err != nil {
		return res, left(fmt.Errorf("installing the platform on cluster %s: %w", u.Name, err))
	}
	return res, nil
}

// generate is the configuration Up writes when none is given: the
// newest embedded release (or --platform-version), DefaultDomain (or
// --domain).
func (u *Up) generate(kubeconfig, path string) (generated, error) {
	g := generated{Name: u.Name, Domain: DefaultDomain, Kubeconfig: kubeconfig, Path: path}
	if u.Overrides.Domain != nil {
		g.Domain = *u.Overrides.Domain
	}
	rels, err := release.Embedded()
	if err != nil {
		return g, err
	}
	rel := rels.Latest()
	if u.Overrides.Version != nil {
		if rel, err = rels.Get(*u.Overrides.Version); err != nil {
			return g, inputErr(fmt.Errorf("--platform-version: %w", err))
		}
	}
	g.Version, g.Components = rel.Version, localComponents(rel)
	return g, nil
}

// loadArchives loads every image archive into every node's containerd.
func (u *Up) loadArchives(ctx context.Context, nodeList []nodes.Node) error {
	for _, a := range u.ImageArchives {
		for _, n := range nodeList {
			if err := ctx.Err(); err != nil {
				return err
			}
			t0 := time.Now()
			f, err := os.Open(a)
			if err != nil {
				return fmt.Errorf("--image-archive %s: %w", a, err)
			}
			size := ""
			if fi, err := f.Stat(); err == nil {
				size = strconv.FormatInt(fi.Size()>>20, 10) + " MiB"
			}
			u.Log.Info("local: loading images into the node", "archive", a, "size", size, "node", n.String())
			err = nodeutils.LoadImageArchive(n, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("--image-archive %s: loading it into node %s: %w (is it a docker-archive, as 'docker save' writes?)", a, n.String(), err)
			}
			u.Log.Info("local: images loaded", "archive", a, "node", n.String(), "elapsed", time.Since(t0).Round(100*time.Millisecond))
		}
	}
	return nil
}

// portsFree checks that the host ports can be listened on.
func portsFree(p Ports) error {
	for _, port := range []struct {
		flag string
		v    int
	}{{"--http-port", p.HTTP}, {"--https-port", p.HTTPS}} {
		addr := net.JoinHostPort(p.ListenAddress, strconv.Itoa(port.v))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return inputErr(fmt.Errorf("%s %d: %s cannot be listened on (%v): stop what uses it, or choose another port with %s",
				port.flag, port.v, addr, err, port.flag))
		}
		ln.Close()
	}
	return nil
}

// serveURL is scheme://domain[:port].
func serveURL(scheme, domain string, port int) string {
	if (scheme == "https" && port == 443) || (scheme == "http" && port == 80) {
		return scheme + "://" + domain
	}
	return scheme + "://" + domain + ":" + strconv.Itoa(port)
}

// reach says how to get to the platform from this machine.
func reach(domain string, p Ports, selfSigned bool) []string {
	ip := p.ListenAddress
	if ip == "0.0.0.0" || ip == "::" {
		ip = "127.0.0.1"
	}
	var out []string
	if strings.HasSuffix(domain, ".localhost") && net.ParseIP(ip).IsLoopback() {
		out = append(out, fmt.Sprintf("%s resolves to 127.0.0.1 by itself in browsers and curl; elsewhere add the line '%s %s' to /etc/hosts", domain, ip, domain))
	} else {
		out = append(out, fmt.Sprintf("add the line '%s %s' to /etc/hosts, or use curl --resolve %s:%d:%s", ip, domain, domain, p.HTTPS, ip))
	}
	if selfSigned {
		out = append(out, fmt.Sprintf("the certificate is self-signed (a CA generated in the cluster): curl -k %s/, or accept it in the browser", serveURL("https", domain, p.HTTPS)))
	}
	out = append(out, fmt.Sprintf("plain HTTP: curl %s/", serveURL("http", domain, p.HTTP)))
	return out
}

// next are the commands to go on with.
func next(name, kubeconfig, cfg string) []string {
	return []string{
		"export KUBECONFIG=" + kubeconfig,
		"onprem status --kubeconfig " + kubeconfig,
		fmt.Sprintf("onprem install -c %s --kubeconfig %s", cfg, kubeconfig),
		"onprem local down" + nameFlag(name),
	}
}

func nameFlag(name string) string {
	if name == DefaultName {
		return ""
	}
	return " --name " + name
}

// inputErr marks an error in what the operator gave (exit code 2).
func inputErr(err error) error {
	if err == nil {
		return nil
	}
	return &action.InputError{Err: err}
}
