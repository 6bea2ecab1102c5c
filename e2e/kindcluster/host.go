//go:build linux

package kindcluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"onprem.dev/onprem/e2e/internal/cmdout"
	"onprem.dev/onprem/internal/fsutil"
)

// capSysResource is CAP_SYS_RESOURCE's bit in the capability sets.
const capSysResource = 24

// cmdOpts are the optional parts of a command run by runCmd.
type cmdOpts struct {
	dir    string
	env    []string // added to the process's environment
	stdin  io.Reader
	stdout io.Writer // besides the step's log; nil: only the log
	quiet  bool      // do not log the command line
}

// runCmd runs name with args, keeping its combined output in
// logs/<step>.log in the cache folder (appended). On failure the error
// names the command and carries the tail of its output. Cancelling ctx
// kills the command's whole process group.
func (b *builder) runCmd(ctx context.Context, step string, o cmdOpts, name string, args ...string) error {
	logs := filepath.Join(b.dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(logs, step+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	line := name + " " + strings.Join(args, " ")
	if name == "bash" && len(args) >= 2 && args[0] == "-c" {
		// bash -c SCRIPT NAME ARGS...: name the script, not its text.
		line = "bash " + strings.Join(args[2:], " ")
	}
	fmt.Fprintf(logFile, "\n== %s %s\n", time.Now().UTC().Format(time.RFC3339), line)
	if !o.quiet {
		b.log("[%s] %s", step, cmdout.Shorten(line, 200))
	}
	var out cmdout.TailBuffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = o.dir
	cmd.Env = append(os.Environ(), o.env...)
	cmd.Stdin = o.stdin
	if o.stdout != nil {
		cmd.Stdout = o.stdout
	} else {
		cmd.Stdout = io.MultiWriter(logFile, &out)
	}
	cmd.Stderr = io.MultiWriter(logFile, &out)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s (%s, log %s): %w\n%s", cmdout.Shorten(line, 300), time.Since(t0).Round(time.Second),
			logFile.Name(), err, out.Tail(30))
	}
	return nil
}

// output runs a short command and returns its trimmed standard output.
func output(ctx context.Context, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// ensureHostPackages installs the Debian packages the harness needs when
// any is missing.
func (b *builder) ensureHostPackages(ctx context.Context) error {
	var missing []string
	for _, p := range hostPackages {
		st, err := output(ctx, "dpkg-query", "-W", "-f=${db:Status-Status}", p)
		if err != nil || st != "installed" {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("Debian packages %s are missing and installing them needs root", strings.Join(missing, " "))
	}
	t0 := time.Now()
	env := []string{"DEBIAN_FRONTEND=noninteractive"}
	// apt's own lock serialises us with anyone else using apt: wait for it.
	lockWait := "-oDPkg::Lock::Timeout=600"
	if err := b.runCmd(ctx, "host-packages", cmdOpts{env: env}, "apt-get", lockWait, "update"); err != nil {
		return err
	}
	args := append([]string{lockWait, "install", "-y", "--no-install-recommends"}, hostPackages...)
	if err := b.runCmd(ctx, "host-packages", cmdOpts{env: env}, "apt-get", args...); err != nil {
		return err
	}
	b.record("host packages "+strings.Join(missing, " "), time.Since(t0))
	return nil
}

// hostNeedsNoSysRes reports whether CAP_SYS_RESOURCE is missing from this
// process's capability bounding set (quirk 1 in the README).
func hostNeedsNoSysRes() bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && bits&(1<<capSysResource) == 0
		}
	}
	return false
}

// dockerAnswers finds the docker CLI and checks that the daemon answers.
func (b *builder) dockerAnswers(ctx context.Context) error {
	if b.docker == "" {
		p, err := exec.LookPath("docker")
		if err != nil {
			return err
		}
		b.docker = p
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := output(cctx, b.docker, "version", "--format", "{{.Server.Version}}")
	return err
}

// ensureDocker starts dockerd in the background unless docker answers
// already. On a host that lacks CAP_SYS_RESOURCE, dockerd's default runtime
// is the runc-nosysres wrapper.
func (b *builder) ensureDocker(ctx context.Context) error {
	needWrapper := hostNeedsNoSysRes()
	if needWrapper {
		if err := b.writeRuncWrapper(); err != nil {
			return err
		}
	}
	if err := b.dockerAnswers(ctx); err == nil {
		return b.checkDockerRuntime(ctx, needWrapper)
	}
	lock := filepath.Join(b.dir, ".dockerd.lock")
	unlock, err := fsutil.Lock(ctx, lock, func() { b.log("waiting for another process (lock %s)", lock) })
	if err != nil {
		return err
	}
	defer unlock()
	if err := b.dockerAnswers(ctx); err == nil {
		return b.checkDockerRuntime(ctx, needWrapper)
	}
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		return fmt.Errorf("docker does not answer and there is no dockerd to start: %w", err)
	}
	cfg := map[string]any{}
	if needWrapper {
		cfg["runtimes"] = map[string]any{"runc-nosysres": map[string]string{"path": b.bin("runc-nosysres")}}
		cfg["default-runtime"] = "runc-nosysres"
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(b.dir, "docker", "daemon.json")
	if err := os.MkdirAll(filepath.Dir(cfgPath), 0o755); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(cfgPath, data, 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(b.dir, "logs", "dockerd.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	// dockerd outlives the test process on purpose: later runs (and kept
	// clusters) use it. Its own session, so no terminal signal reaches it.
	cmd := exec.Command(dockerd, "--config-file", cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dockerd: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.log("[dockerd] started dockerd (pid %d, config %s, log %s)", pid, cfgPath, logPath)
	b.dockerLog = logPath
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := b.dockerAnswers(ctx); err == nil {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("dockerd exited (%v); see %s", err, logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dockerd (pid %d) did not answer within 2m; see %s", pid, logPath)
		}
	}
}

// checkDockerRuntime verifies that a dockerd that was already running can
// run privileged containers on this host.
func (b *builder) checkDockerRuntime(ctx context.Context, needWrapper bool) error {
	if !needWrapper {
		return nil
	}
	rt, err := output(ctx, b.docker, "info", "--format", "{{.DefaultRuntime}}")
	if err != nil {
		return err
	}
	if !strings.Contains(rt, "nosysres") {
		return fmt.Errorf("dockerd is running with default runtime %q, but this host's capability bounding set "+
			"lacks CAP_SYS_RESOURCE, so privileged kind nodes would fail (\"unable to apply caps\"); stop dockerd "+
			"and let the harness start it, or start it with a runtime that drops CAP_SYS_RESOURCE "+
			"(the harness's wrapper is %s)", rt, b.bin("runc-nosysres"))
	}
	// A dockerd another harness started (another $ONPREM_CACHE) runs the
	// wrapper of that cache: when that cache is gone, every container
	// fails with exit status 127 and no word of why.
	paths, err := output(ctx, b.docker, "info", "--format", `{{range .Runtimes}}{{.Path}}{{"\n"}}{{end}}`)
	if err != nil {
		return err
	}
	for _, p := range strings.Fields(paths) {
		if strings.Contains(p, "nosysres") {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("dockerd's runtime %s is gone (the cache that held it was removed, and dockerd kept running): "+
					"stop dockerd (and its kind containers) and let the harness start it again: %w", p, err)
			}
		}
	}
	return nil
}

// writeRuncWrapper writes bin/runc-nosysres, pointing at the host's runc
// and jq.
func (b *builder) writeRuncWrapper() error {
	runc, err := exec.LookPath("runc")
	if err != nil {
		for _, p := range []string{"/usr/sbin/runc", "/usr/bin/runc"} {
			if _, serr := os.Stat(p); serr == nil {
				runc, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("runc not found: %w", err)
	}
	jq, err := exec.LookPath("jq")
	if err != nil {
		return fmt.Errorf("jq not found: %w", err)
	}
	script := strings.NewReplacer("@RUNC@", runc, "@JQ@", jq).Replace(asset("runc-nosysres.sh"))
	path := b.bin("runc-nosysres")
	if cur, err := os.ReadFile(path); err == nil && string(cur) == script {
		return nil
	}
	return fsutil.WriteFileAtomic(path, []byte(script), 0o755)
}
