package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/rotate"
	"onprem.dev/onprem/installer/state"
)

// killWhen runs onprem with args as a child process and SIGKILLs its
// process group as soon as it prints a line containing marker on
// standard error (its progress). It fails the test when onprem ends
// before that.
func killWhen(t *testing.T, marker string, args ...string) {
	t.Helper()
	cmd := childCommand(args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), marker) {
			killGroup(cmd)
			return
		}
	}
	err = cmd.Wait()
	t.Fatalf("onprem %s ended (%v) before printing %q:\n%s%s", strings.Join(args, " "), err, marker, strings.Join(seen, "\n"), stdout.String())
}

// A key rotation killed (SIGKILL, the whole process group) at each of
// its writes is finished by the same command run again: the rings and
// the step are what the kill left, the re-run says what it finished, and
// the history holds no key.
func TestRotateKeysCrashSafety(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	dir := t.TempDir()
	ctx := context.Background()
	cl := kube.Options{Kubeconfig: c.Kubeconfig}
	sharedIngressClass(t, c)
	const ns = "keys-crash"
	cfg := crashConfig(t, dir, ns)
	if _, err := (&action.Install{Source: action.Source{ConfigPath: cfg}, Cluster: cl, Timeout: 2 * time.Minute,
		LockWait: time.Minute, LockLease: steadyLease}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	target := action.Target{Cluster: cl, ConfigPath: cfg}
	keys := func() (sign, signRing, enc, encRing, step string) {
		t.Helper()
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, credentials.PlatformKeys, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(s.Data[rotate.KeySigning]), string(s.Data[rotate.KeySigningRing]), string(s.Data[rotate.KeyEncryption]),
			string(s.Data[rotate.KeyEncryptionRing]), s.Annotations[rotate.AnnotationKeysStep]
	}
	sign0, _, enc0, _, _ := keys()
	var seen []string // every key the test saw, none of which the history may hold
	rerun := func(retire bool) *rotate.KeysResult {
		t.Helper()
		res, err := (&action.RotateKeys{Target: target, Retire: retire, Timeout: 2 * time.Minute, LockWait: time.Minute, LockLease: steadyLease}).Run(ctx)
		if err != nil {
			t.Fatalf("the run after the kill: %v", err)
		}
		return res
	}
	args := []string{"rotate", "keys", "-c", cfg, "--kubeconfig", c.Kubeconfig, "--lock-lease", killedLease.String(), "--timeout", "2m"}

	// Killed once the new keys are staged: they verify, the old ones sign.
	killWhen(t, "new keys staged", args...)
	sign, signRing, enc, encRing, step := keys()
	if step != rotate.KeysStaged || sign != sign0 || enc != enc0 || !strings.HasSuffix(signRing, "\n"+sign0) || !strings.HasSuffix(encRing, "\n"+enc0) {
		t.Fatalf("killed after staging: step %q, the old keys signing %v, rings of %d and %d keys", step, sign == sign0,
			strings.Count(signRing, "\n")+1, strings.Count(encRing, "\n")+1)
	}
	sign1, _, _ := strings.Cut(signRing, "\n")
	seen = append(seen, sign0, enc0, sign1)
	res := rerun(false)
	sign, signRing2, _, encRing2, step := keys()
	if res.Resumed != "staging the new keys" || step != "" || sign != sign1 || signRing2 != signRing || encRing2 != encRing {
		t.Fatalf("the re-run after a kill at staging: %+v; step %q, the staged key signs: %v, rings unchanged: %v", res, step, sign == sign1,
			signRing2 == signRing && encRing2 == encRing)
	}
	if len(res.Restarted) == 0 {
		t.Error("no workload restarted onto the new keys")
	}

	// Killed once the new keys sign: the next run only finishes the
	// rollout.
	killWhen(t, "the new keys sign and encrypt", args...)
	sign, signRing, enc, encRing, step = keys()
	if step != rotate.KeysSwitched || strings.Count(signRing, "\n") != 2 || !strings.HasPrefix(signRing, sign+"\n") || !strings.HasPrefix(encRing, enc+"\n") {
		t.Fatalf("killed after switching: step %q, a ring of %d keys", step, strings.Count(signRing, "\n")+1)
	}
	seen = append(seen, sign, enc)
	if res := rerun(false); res.Resumed != "switching to the new keys" || res.RingAfter != 3 {
		t.Fatalf("the re-run after a kill at the switch: %+v", res)
	}
	if _, _, _, _, step = keys(); step != "" {
		t.Fatalf("finished, the step is %q", step)
	}

	// Retirement killed after its write.
	killWhen(t, "the rings hold the current keys only", append(args, "--retire")...)
	sign, signRing, enc, encRing, step = keys()
	if step != rotate.KeysRetiring || signRing != sign || encRing != enc {
		t.Fatalf("killed while retiring: step %q, only the current keys: %v", step, signRing == sign && encRing == enc)
	}
	if res := rerun(true); res.Resumed != "retiring the older keys" || res.RingAfter != 1 {
		t.Fatalf("the re-run after a kill while retiring: %+v", res)
	}

	// spec.rotation.keysMaxAgeDays: an install rotates keys older than
	// that (never retiring), and leaves younger ones alone.
	body, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	aged := filepath.Join(dir, "keys-max-age.yaml")
	if err := os.WriteFile(aged, append(body, "  rotation: {keysMaxAgeDays: 1}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	install := func() *action.InstallResult {
		t.Helper()
		res, err := (&action.Install{Source: action.Source{ConfigPath: aged}, Cluster: cl, Timeout: 2 * time.Minute,
			LockWait: time.Minute, LockLease: steadyLease}).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := install(); res.KeyRotation != "" {
		t.Fatalf("keys rotated an hour ago were rotated again by install: %s", res.KeyRotation)
	}
	s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, credentials.PlatformKeys, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations[rotate.AnnotationRotatedAt] = time.Now().Add(-49 * time.Hour).UTC().Format(time.RFC3339)
	if _, err := c.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before, _, _, _, _ := keys()
	if res := install(); !strings.Contains(res.KeyRotation, "rotated (spec.rotation.keysMaxAgeDays): 2 keys in each ring") {
		t.Fatalf("install with keys 2 days old and keysMaxAgeDays 1: %q", res.KeyRotation)
	}
	if sign, signRing, _, _, step := keys(); sign == before || signRing != sign+"\n"+before || step != "" {
		t.Fatalf("after the install's rotation: a new key signs: %v, ring of %d, step %q", sign != before, strings.Count(signRing, "\n")+1, step)
	}
	if res := install(); res.KeyRotation != "" {
		t.Fatalf("the next install rotated again: %s", res.KeyRotation)
	}

	st, err := state.NewStore(c.Client, ns).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rotations := 0
	for i, op := range st.History {
		if op.Outcome == state.OutcomeRunning {
			t.Errorf("history %d (%s) is still recorded as running", i, op.Message)
		}
		for _, k := range seen {
			if strings.Contains(op.Message, k) {
				t.Errorf("history %d holds a key: %s", i, op.Kind)
			}
		}
		if op.Kind == state.KindRotate {
			rotations++
		}
	}
	if last := st.History[len(st.History)-1]; last.Outcome != state.OutcomeSucceeded {
		t.Errorf("the last operation: %s %q", last.Outcome, last.Message)
	}
	if rotations != 6 {
		t.Errorf("%d rotations in the history, want 6 (3 killed, 3 finishing)", rotations)
	}
}
