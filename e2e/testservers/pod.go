//go:build linux

package testservers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PodSpec is a container of a pod, as a host process runs it: its command,
// its resolved environment and the folders mounted where the container
// sees them. It is what StartPod needs to run a database's real program
// with exactly the configuration a chart gives its pods.
type PodSpec struct {
	// Name is the pod's name (its members call themselves by it).
	Name string
	// Command is the container's command and arguments.
	Command []string
	// Env is the container's environment, $(VAR) references resolved.
	Env map[string]string
	// Mounts maps a path in the container to a host folder (or a file,
	// mounted over the container's file of that path). Every mount is
	// given to the server's user.
	Mounts map[string]string
	// Packages are the Debian packages the command needs (installed when
	// missing) and a program of each that shows it is installed.
	Packages map[string]string
}

// Pod is a container started by StartPod.
type Pod struct {
	Name string
	Log  string
	spec PodSpec
	t    testing.TB
	p    *process
	// paused are the processes Pause stopped.
	paused []int
}

// StartPod runs a pod's container as a process of its own on this machine,
// isolated as a container is where the program would notice: a mount
// namespace in which Mounts are bind-mounted at their container paths, and
// a PID namespace, so that Kill ends every process the container started
// at once, as a lost node does (PostgreSQL, which Patroni starts detached,
// included). The network is the machine's: give every pod its own address
// (AddAddress) and listen there. It runs as PostgreSQL's server user
// (postgres, or onprem-test), needs root, and is stopped in t.Cleanup.
func StartPod(t testing.TB, spec PodSpec) *Pod {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("testservers: StartPod needs root (mount and PID namespaces)")
	}
	for pkg, bin := range spec.Packages {
		ensurePackage(t, pkg, bin)
	}
	pod := &Pod{Name: spec.Name, spec: spec, t: t, Log: filepath.Join(tempDir(t, "onprem-pod-"), spec.Name+".log")}
	pod.Start()
	return pod
}

// Start starts the container again after Kill, with the same mounts (as
// a node that comes back does).
func (p *Pod) Start() {
	p.t.Helper()
	cred := serverUser(p.t)
	paths := make([]string, 0, len(p.spec.Mounts))
	for path := range p.spec.Mounts {
		paths = append(paths, path)
	}
	// Parents before children, and last the mounts that would hide a
	// source folder (a pod's /tmp over this machine's, where the sources
	// are).
	hides := func(target string) bool {
		for _, src := range p.spec.Mounts {
			if strings.HasPrefix(src+"/", strings.TrimSuffix(target, "/")+"/") {
				return true
			}
		}
		return false
	}
	sort.Slice(paths, func(i, j int) bool {
		if hi, hj := hides(paths[i]), hides(paths[j]); hi != hj {
			return hj
		}
		return paths[i] < paths[j]
	})
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, path := range paths {
		host := p.spec.Mounts[path]
		if err := chownAll(host, int(cred.Uid), int(cred.Gid)); err != nil {
			p.t.Fatalf("testservers: pod %s: %v", p.spec.Name, err)
		}
		if fi, err := os.Stat(host); err == nil && fi.Mode().IsRegular() {
			// One file over the container's (a hosts file over /etc/hosts).
			fmt.Fprintf(&script, "[ -e %s ] || : > %s\nmount --bind %s %s\n", shellQuote(path), shellQuote(path), shellQuote(host), shellQuote(path))
			continue
		}
		fmt.Fprintf(&script, "mkdir -p %s\nmount --bind %s %s\n", shellQuote(path), shellQuote(host), shellQuote(path))
	}
	fmt.Fprintf(&script, "exec setpriv --reuid=%d --regid=%d --clear-groups --", cred.Uid, cred.Gid)
	for _, a := range p.spec.Command {
		script.WriteString(" " + shellQuote(a))
	}
	script.WriteString("\n")
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc",
		"--kill-child", "--", "sh", "-c", script.String())
	env := make([]string, 0, len(p.spec.Env))
	for k, v := range p.spec.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	cmd.Env = env
	p.p = start(p.t, "pod "+p.spec.Name, p.Log, cmd)
}

// Kill ends every process of the container at once (SIGKILL), as losing
// its node does.
func (p *Pod) Kill() {
	if p.p == nil || p.p.exited() {
		return
	}
	// unshare --kill-child: its death kills the namespace's first process,
	// and with it every process of the namespace.
	_ = syscall.Kill(-p.p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.p.done:
	case <-time.After(10 * time.Second):
		p.t.Errorf("testservers: pod %s did not end within 10 s of SIGKILL", p.spec.Name)
	}
}

// Stop stops the container as the kubelet does: SIGTERM to its first
// process, which must end (and with it the container) within grace;
// otherwise every process is killed, as the kubelet kills at the end of
// the grace period. It reports whether the container ended by itself,
// and when.
func (p *Pod) Stop(grace time.Duration) (stopped bool, took time.Duration) {
	p.t.Helper()
	if p.p == nil || p.p.exited() {
		return true, 0
	}
	first := p.firstProcess()
	t0 := time.Now()
	_ = syscall.Kill(first, syscall.SIGTERM)
	select {
	case <-p.p.done:
		return true, time.Since(t0)
	case <-time.After(grace):
		p.Kill()
		return false, time.Since(t0)
	}
}

// firstProcess is the PID (on this machine) of the container's first
// process: the program of its command, which the script ran with exec.
func (p *Pod) firstProcess() int {
	p.t.Helper()
	// unshare --fork: its child is the namespace's first process.
	unshare := p.p.cmd.Process.Pid
	var first int
	for deadline := time.Now().Add(5 * time.Second); first == 0 && time.Now().Before(deadline); {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unshare, unshare))
		if err == nil {
			fmt.Sscan(string(data), &first)
		}
		if first == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if first == 0 {
		p.t.Fatalf("testservers: pod %s: no first process under unshare (%d)", p.spec.Name, unshare)
	}
	return first
}

// Pause stops (SIGSTOP) every process of the container whose command
// line holds program, and only those: as an overloaded node or a
// network partition stops a program's loop while the processes it
// started run on (Patroni, which forks itself when it is a container's
// first process, stops; its PostgreSQL runs on). Resume lets them go on
// (SIGCONT); a paused pod is resumed in t.Cleanup before it is stopped.
func (p *Pod) Pause(program string) {
	p.t.Helper()
	if p.p == nil || p.p.exited() {
		p.t.Fatalf("testservers: pod %s: pausing a container that is not running", p.spec.Name)
	}
	p.paused = nil
	for _, pid := range descendants(p.p.cmd.Process.Pid) {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), program) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			p.t.Fatalf("testservers: pod %s: SIGSTOP %d: %v", p.spec.Name, pid, err)
		}
		p.paused = append(p.paused, pid)
	}
	if len(p.paused) == 0 {
		p.t.Fatalf("testservers: pod %s: no process runs %s", p.spec.Name, program)
	}
	pids := p.paused
	p.t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	// The pause took only when each shows as stopped.
	for _, pid := range pids {
		var state string
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if state = procState(pid); state == "T" {
				break
			}
		}
		if state != "T" {
			p.t.Fatalf("testservers: pod %s: process %d is in state %q 2 s after SIGSTOP, not stopped", p.spec.Name, pid, state)
		}
	}
}

// Resume undoes Pause.
func (p *Pod) Resume() {
	p.t.Helper()
	for _, pid := range p.paused {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			p.t.Fatalf("testservers: pod %s: SIGCONT %d: %v", p.spec.Name, pid, err)
		}
	}
	p.paused = nil
}

// descendants lists the processes below pid (children, theirs, ...), as
// /proc's task children files say.
func descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", next))
		for _, task := range tasks {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", next, task.Name()))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				var child int
				if _, err := fmt.Sscan(f, &child); err == nil {
					out = append(out, child)
					queue = append(queue, child)
				}
			}
		}
	}
	return out
}

// procState is the state letter of process pid (R, S, T...), "" when it
// cannot be read.
func procState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	rest := string(data[strings.LastIndexByte(string(data), ')')+1:])
	if f := strings.Fields(rest); len(f) > 0 {
		return f[0]
	}
	return ""
}

// Exited reports whether the container's processes have ended.
func (p *Pod) Exited() bool { return p.p == nil || p.p.exited() }

// LogTail is the last n lines of the container's output.
func (p *Pod) LogTail(n int) string { return tail(p.Log, n) }

// AddAddress gives this machine the IPv4 address ip (on the loopback
// interface, /32) until the test ends: a pod's own address, which servers
// can listen on and Endpoints can name (the API server refuses loopback
// addresses in Endpoints). It needs root.
func AddAddress(t testing.TB, ip string) {
	t.Helper()
	out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") {
		t.Fatalf("testservers: ip addr add %s/32 dev lo: %v: %s", ip, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", ip+"/32", "dev", "lo").Run() })
}

// WriteFiles writes files (name → content) into a new folder, each with
// mode, and returns the folder: a ConfigMap or Secret volume's content.
func WriteFiles(t testing.TB, files map[string][]byte, mode os.FileMode) string {
	t.Helper()
	dir := tempDir(t, "onprem-volume-")
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, mode); err != nil {
			t.Fatalf("testservers: %v", err)
		}
	}
	return dir
}

// EmptyDir returns a new empty folder (an emptyDir or a volume's).
func EmptyDir(t testing.TB) string {
	t.Helper()
	dir := tempDir(t, "onprem-volume-")
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatalf("testservers: %v", err)
	}
	return dir
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// PostgreSQLBin is the folder of the newest installed PostgreSQL's server
// programs (initdb, pg_ctl, postgres, ...), installing Debian's postgresql
// when it is missing.
func PostgreSQLBin(t testing.TB) string {
	t.Helper()
	return filepath.Dir(ensurePackage(t, "postgresql", "/usr/lib/postgresql/*/bin/initdb"))
}
