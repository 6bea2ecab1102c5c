//go:build linux

// Package sandbox runs an image's program on this machine the way a
// container runtime would under a pod's securityContext, without a
// container runtime: the image's unpacked root filesystem (read-only when
// asked), the pod's volumes as tmpfs mounts owned and moded as the kubelet
// makes them, the pod's user, group and fsGroup, its own network (only
// loopback), PID, mount, UTS and IPC namespaces, and a hostname. It is how
// e2e/images proves that an image serves under its chart's contract before
// any cluster exists.
//
// The sandbox is a re-executed copy of the test binary (which must call
// Main first thing in TestMain) that sets up the namespaces and mounts as
// root and then starts the program as the pod's user; Dial reaches the
// sandbox's loopback from the test; Exec runs a command inside (a probe)
// through nsenter.
package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Mount is a volume of the pod.
type Mount struct {
	// Target is the path in the image (symbolic links in it are resolved
	// inside the root filesystem, as the container runtime does).
	Target string
	// Source, when set, is a file or folder of this machine bound onto
	// Target (a persistent volume, a ConfigMap key mounted with subPath, an
	// /etc/hosts). Otherwise Target is a tmpfs.
	Source string
	// Mode, UID and GID of the tmpfs's root.
	Mode     os.FileMode
	UID, GID int
	// Files are created in the tmpfs (a Secret's keys).
	Files []File
	// LostFound adds lost+found (root's, 0700), as on a fresh ext4
	// volume.
	LostFound bool
	// ReadOnly remounts it read-only once populated.
	ReadOnly bool
}

// File is a file in a tmpfs Mount.
type File struct {
	Name     string
	Data     []byte
	Mode     os.FileMode
	UID, GID int
}

// Spec says what to run and how.
type Spec struct {
	// Root is the unpacked root filesystem.
	Root         string
	ReadOnlyRoot bool
	Hostname     string
	// Args is the command (the container's command + args); Args[0] is
	// looked up in the PATH of Env when it has no slash.
	Args []string
	Env  []string
	// Dir is the working folder in the image ("/" when empty).
	Dir string
	// UID, GID and Groups are the process's identity (runAsUser,
	// runAsGroup, and fsGroup as a supplementary group).
	UID, GID int
	Groups   []int
	Mounts   []Mount
}

const envSpec = "ONPREM_IMAGES_SANDBOX_SPEC"

// Sandbox is a running sandbox.
type Sandbox struct {
	Spec Spec
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// Start starts spec; the program's output (and the sandbox's own errors)
// go to logPath. Stop it with Stop.
func Start(spec Spec, logPath string) (*Sandbox, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("sandbox: running an image's program needs root (namespaces, mounts, chroot)")
	}
	if len(spec.Args) == 0 {
		return nil, errors.New("sandbox: no command")
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	specFile := logPath + ".spec.json"
	if err := os.WriteFile(specFile, data, 0o600); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envSpec+"="+specFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("sandbox: starting %s in new namespaces: %w", self, err)
	}
	s := &Sandbox{Spec: spec, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	return s, nil
}

// Log is the path of the program's output.
func (s *Sandbox) Log() string { return s.log }

// Done is closed when the program has exited; Err then says how.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Err is the program's exit status once Done is closed.
func (s *Sandbox) Err() error { return s.err }

// Stop sends SIGTERM to the program (as the kubelet does), waits up to
// grace, then kills the whole sandbox. It returns the exit status.
func (s *Sandbox) Stop(grace time.Duration) error {
	select {
	case <-s.done:
		return s.err
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(grace):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	return s.err
}

// Dial connects to addr in the sandbox's network namespace (its loopback):
// the socket is made on a thread that has entered the namespace, so the
// connection works from any goroutine afterwards.
func (s *Sandbox) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only when the thread is back in this process's
		// namespace; otherwise it dies with this goroutine.
		here, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer here.Close()
		there, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", s.cmd.Process.Pid))
		if err != nil {
			ch <- result{err: fmt.Errorf("the sandbox's network namespace: %w", err)}
			return
		}
		defer there.Close()
		if err := setns(there, syscall.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		c, dialErr := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err := setns(here, syscall.CLONE_NEWNET); err != nil {
			if c != nil {
				c.Close()
			}
			ch <- result{err: err}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{c, dialErr}
	}()
	r := <-ch
	return r.c, r.err
}

func setns(f *os.File, nstype int) error {
	if err := unix.Setns(int(f.Fd()), nstype); err != nil {
		return fmt.Errorf("setns %s: %w", f.Name(), err)
	}
	return nil
}

// Exec runs args inside the sandbox (its namespaces and root, as uid:gid,
// with env), the way the kubelet runs an exec probe, and returns the
// combined output.
func (s *Sandbox) Exec(ctx context.Context, uid, gid int, env []string, args ...string) ([]byte, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("sandbox: nsenter (util-linux) is needed to run a command inside: %w", err)
	}
	pid := strconv.Itoa(s.cmd.Process.Pid)
	nsArgs := []string{"--target", pid, "--mount", "--net", "--pid", "--uts", "--ipc", "--root", "--wd",
		"--setuid", strconv.Itoa(uid), "--setgid", strconv.Itoa(gid), "--"}
	cmd := exec.CommandContext(ctx, nsenter, append(nsArgs, args...)...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

var mainOnce sync.Once

// Main turns the process into a sandbox when it was started as one (call
// it first in TestMain); otherwise it returns at once.
func Main() {
	path := os.Getenv(envSpec)
	if path == "" {
		return
	}
	mainOnce.Do(func() {
		code, err := runSandbox(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandbox: %v\n", err)
			os.Exit(125)
		}
		os.Exit(code)
	})
}

// runSandbox is the sandbox process: pid 1 of its namespaces.
func runSandbox(specPath string) (int, error) {
	data, err := os.ReadFile(specPath)
	if err != nil {
		return 0, err
	}
	var spec Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return 0, fmt.Errorf("reading %s: %w", specPath, err)
	}
	if err := setup(spec); err != nil {
		return 0, err
	}
	return runChild(spec)
}

func setup(spec Spec) error {
	root, err := filepath.Abs(spec.Root)
	if err != nil {
		return err
	}
	// Nothing mounted here reaches the machine's mount namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	// Mount points the container runtime would create (in the image's
	// tree, before it is made read-only).
	type point struct {
		m    Mount
		path string
	}
	var points []point
	for _, m := range spec.Mounts {
		p, err := resolve(root, m.Target)
		if err != nil {
			return fmt.Errorf("volume %s: %w", m.Target, err)
		}
		if st, err := os.Stat(m.Source); m.Source != "" && err == nil && st.IsDir() {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return fmt.Errorf("volume %s: %w", m.Target, err)
			}
		} else if m.Source != "" {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("volume %s: %w", m.Target, err)
			}
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					return fmt.Errorf("volume %s: %w", m.Target, err)
				}
			}
		} else if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("volume %s: %w", m.Target, err)
		}
		points = append(points, point{m, p})
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount(root, root, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting the root filesystem: %w", err)
	}
	if spec.ReadOnlyRoot {
		if err := syscall.Mount("", root, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making the root filesystem read-only: %w", err)
		}
	}
	if err := mountSystem(root); err != nil {
		return err
	}
	for _, pt := range points {
		if err := mountVolume(pt.m, pt.path); err != nil {
			return fmt.Errorf("volume %s: %w", pt.m.Target, err)
		}
	}
	if spec.Hostname != "" {
		if err := syscall.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("sethostname: %w", err)
		}
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	if err := syscall.Chroot(root); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	dir := spec.Dir
	if dir == "" {
		dir = "/"
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("working folder %s: %w", dir, err)
	}
	return nil
}

// mountSystem gives the root /proc, a read-only /sys, and a /dev with the
// usual devices and a /dev/shm, as a container has.
func mountSystem(root string) error {
	if err := syscall.Mount("proc", filepath.Join(root, "proc"), "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	if err := syscall.Mount("sysfs", filepath.Join(root, "sys"), "sysfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC|syscall.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("mounting /sys: %w", err)
	}
	dev := filepath.Join(root, "dev")
	if err := syscall.Mount("tmpfs", dev, "tmpfs", syscall.MS_NOSUID|syscall.MS_STRICTATIME, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := filepath.Join(dev, d)
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return err
		}
		if err := syscall.Mount("/dev/"+d, p, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s: %w", d, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return err
	}
	if err := syscall.Mount("shm", shm, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	return nil
}

func mountVolume(m Mount, path string) error {
	if m.Source != "" {
		if err := syscall.Mount(m.Source, path, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s: %w", m.Source, err)
		}
		if m.ReadOnly {
			if err := syscall.Mount("", path, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
				return err
			}
		}
		return nil
	}
	opts := fmt.Sprintf("mode=%o,uid=%d,gid=%d,size=256m", perm(m.Mode), m.UID, m.GID)
	if err := syscall.Mount("tmpfs", path, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting a tmpfs: %w", err)
	}
	if m.LostFound {
		if err := os.Mkdir(filepath.Join(path, "lost+found"), 0o700); err != nil {
			return err
		}
	}
	for _, f := range m.Files {
		p := filepath.Join(path, filepath.Base(f.Name))
		if err := os.WriteFile(p, f.Data, 0o600); err != nil {
			return err
		}
		if err := os.Chown(p, f.UID, f.GID); err != nil {
			return err
		}
		if err := os.Chmod(p, os.FileMode(perm(f.Mode))); err != nil {
			return err
		}
	}
	if m.ReadOnly {
		if err := syscall.Mount("", path, "", syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
			return fmt.Errorf("making it read-only: %w", err)
		}
	}
	return nil
}

// perm is the permission bits of a mode, with the setuid, setgid and
// sticky bits in their Unix places.
func perm(m os.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// loopbackUp brings lo up in the new network namespace.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer syscall.Close(fd)
	var ifr [40]byte // struct ifreq: name[16], then a union (flags: short)
	copy(ifr[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptrOf(&ifr)); e != 0 {
		return fmt.Errorf("loopback flags: %w", e)
	}
	flags := uint16(ifr[16]) | uint16(ifr[17])<<8 | syscall.IFF_UP | syscall.IFF_RUNNING
	ifr[16], ifr[17] = byte(flags), byte(flags>>8)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptrOf(&ifr)); e != 0 {
		return fmt.Errorf("bringing loopback up: %w", e)
	}
	return nil
}

// runChild starts the program as the pod's user and, as pid 1, reaps
// every child, passes SIGTERM and SIGINT on, and returns the program's exit
// code once it exits (which ends the PID namespace and everything in it).
func runChild(spec Spec) (int, error) {
	path := spec.Args[0]
	if !strings.Contains(path, "/") {
		pathEnv := ""
		for _, kv := range spec.Env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				pathEnv = v
			}
		}
		found := ""
		for _, d := range filepath.SplitList(pathEnv) {
			p := filepath.Join(d, path)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				found = p
				break
			}
		}
		if found == "" {
			return 0, fmt.Errorf("%s: not found in the image's PATH %q", path, pathEnv)
		}
		path = found
	}
	groups := make([]uint32, 0, len(spec.Groups))
	for _, g := range spec.Groups {
		groups = append(groups, uint32(g))
	}
	sigs := make(chan os.Signal, 4)
	notify(sigs)
	pid, err := syscall.ForkExec(path, spec.Args, &syscall.ProcAttr{
		Env:   spec.Env,
		Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(spec.UID), Gid: uint32(spec.GID), Groups: groups},
			Setsid:     true,
		},
	})
	if err != nil {
		return 0, fmt.Errorf("starting %s as %d:%d: %w", path, spec.UID, spec.GID, err)
	}
	go func() {
		for sig := range sigs {
			_ = syscall.Kill(pid, sig.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("waiting for %s: %w", path, err)
		}
		if wpid != pid {
			continue // an orphan, reaped
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus(), nil
		case ws.Signaled():
			return 128 + int(ws.Signal()), nil
		}
	}
}
