//go:build linux

package platform

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// consoleOverview runs `onprem console` against the real platform, logs in
// with the URL it prints, and checks the overview and one service's page
// (with real log lines); then stops it with an interrupt, which must end
// it cleanly.
func (e *env) consoleOverview(version string) {
	t := e.t
	cmd := exec.Command(e.bin, "console", "--listen", "127.0.0.1:0", "--namespace", namespace, "--log-level", "info")
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out)
		done <- cmd.Wait()
	}()
	var login string
	select {
	case login = <-lines:
	case <-time.After(time.Minute):
		t.Fatalf("onprem console printed no URL in a minute; stderr:\n%s", stderr.String())
	}
	if !strings.HasPrefix(login, "http://127.0.0.1:") || !strings.Contains(login, "/login?token=") {
		t.Fatalf("onprem console printed %q; stderr:\n%s", login, stderr.String())
	}
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	page := func(url string) string {
		t.Helper()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", url, resp.StatusCode, b)
		}
		return string(b)
	}
	overview := page(login)
	for _, want := range []string{"<h2 id=\"components\">", ">pipelines-api</a>", ">mongodb</a>", "<dd id=\"version\">" + version + "</dd>", "succeeded"} {
		if !strings.Contains(overview, want) {
			t.Fatalf("the console's overview lacks %q:\n%s", want, overview)
		}
	}
	if strings.Contains(overview, `class="bad"`) {
		t.Fatalf("the console's overview shows a component not ready:\n%s", overview)
	}
	base := strings.SplitN(login, "/login", 2)[0]
	comp := page(base + "/components/pipelines-api")
	for _, want := range []string{"Container pipelines-api", "running, ready", `class="log"`, "Helm history"} {
		if !strings.Contains(comp, want) {
			t.Fatalf("the console's page of pipelines-api lacks %q:\n%s", want, comp)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Fatalf("onprem console after an interrupt: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("onprem console did not stop within 30 s of an interrupt")
	}
	t.Logf("onprem console served the overview of %d bytes and pipelines-api's page of %d bytes", len(overview), len(comp))
}
