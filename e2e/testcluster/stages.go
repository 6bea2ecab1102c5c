//go:build linux

package testcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Pod annotations understood by the simulated kubelet (kwok stages written
// by this package). Put them on a pod template to script what happens to
// its pods.
const (
	// AnnotationFail: a pod annotated "true" turns Running, then Failed
	// (its containers terminate with AnnotationExitCode, default 1). A Job
	// with backoffLimit 0 whose template has it ends Failed.
	AnnotationFail = "onprem.dev/fail"
	// AnnotationExitCode sets the exit code of a pod failed by AnnotationFail.
	AnnotationExitCode = "onprem.dev/exit-code"
	// AnnotationNeverReady: a pod annotated "true" turns Running but never
	// Ready, so its Deployment or StatefulSet never becomes available.
	AnnotationNeverReady = "onprem.dev/never-ready"
	// AnnotationWaiting: a pending pod annotated with a reason
	// (ImagePullBackOff, CrashLoopBackOff, ...) turns Running with every
	// container waiting for that reason and never ready, as a kubelet
	// shows a pod whose image cannot be pulled or that keeps crashing.
	// AnnotationWaitingMessage is the waiting message; AnnotationLastReason,
	// when set, is the reason its previous run terminated (Error,
	// OOMKilled), with AnnotationRestarts restarts (default 5) and exit
	// code AnnotationExitCode (default 137).
	AnnotationWaiting        = "onprem.dev/waiting"
	AnnotationWaitingMessage = "onprem.dev/waiting-message"
	AnnotationLastReason     = "onprem.dev/last-reason"
	AnnotationRestarts       = "onprem.dev/restarts"
)

// StorageClassName is the cluster's default StorageClass (provisioner
// kwok.x-k8s.io/volume): kwok's volume stages create and bind a PV for every
// claim of this class, so PVCs turn Bound without a real provisioner. The
// stock stages select this exact name.
const StorageClassName = "kwok-volume"

// ourStageWeight beats the stock stages (weight 0) whenever both match.
const ourStageWeight = 10000

// kwokConfig returns the content of the --config file of kwok: the stock
// stages from the cache and the stages of this package.
func kwokConfig(stockStagesFile string) ([]byte, error) {
	stock, err := os.ReadFile(stockStagesFile)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.Write(stock)
	for _, st := range []map[string]any{podFailStage(), podNeverReadyStage(), podWaitingStage()} {
		j, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return nil, err
		}
		// JSON is YAML: one more document in the multi-document file.
		fmt.Fprintf(&b, "\n---\n%s\n", j)
	}
	return []byte(b.String()), nil
}

func annotationKey(name string) string {
	return fmt.Sprintf(`.metadata.annotations[%q]`, name)
}

// podStage is a kwok Stage for pods that sets the status from tmpl.
func podStage(name string, exprs []map[string]any, tmpl string) map[string]any {
	return map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       "Stage",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"resourceRef": map[string]any{"apiGroup": "v1", "kind": "Pod"},
			"selector":    map[string]any{"matchExpressions": exprs},
			"weight":      ourStageWeight,
			"next":        map[string]any{"statusTemplate": tmpl},
		},
	}
}

func expr(key, op string, values ...string) map[string]any {
	e := map[string]any{"key": key, "operator": op}
	if len(values) > 0 {
		e["values"] = values
	}
	return e
}

// podFailStage fails running pods annotated AnnotationFail=true. It wins
// over the stock pod-complete stage for Job pods.
func podFailStage() map[string]any {
	tmpl := `{{ $now := Now }}
{{ $annotations := or .metadata.annotations dict }}
{{ $exitCode := or ( index $annotations "` + AnnotationExitCode + `" ) 1 }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "False", reason: PodFailed, type: Ready}
- {lastTransitionTime: {{ $now | Quote }}, status: "False", reason: PodFailed, type: ContainersReady}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {{ $exitCode }}
      finishedAt: {{ $now | Quote }}
      reason: Error
      message: "simulated failure (` + AnnotationFail + `)"
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Failed
`
	return podStage("onprem-pod-fail", []map[string]any{
		expr(annotationKey(AnnotationFail), "In", "true"),
		expr(".metadata.deletionTimestamp", "DoesNotExist"),
		expr(".status.phase", "In", "Running"),
	}, tmpl)
}

// podNeverReadyStage takes pending pods annotated AnnotationNeverReady=true
// to Running with every container running but not ready, instead of the
// stock pod-ready stage. No stage matches them afterwards.
func podNeverReadyStage() map[string]any {
	tmpl := `{{ $now := Now }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: PodScheduled}
- {lastTransitionTime: {{ $now | Quote }}, status: "False", reason: ContainersNotReady, type: Ready}
- {lastTransitionTime: {{ $now | Quote }}, status: "False", reason: ContainersNotReady, type: ContainersReady}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
`
	return podStage("onprem-pod-never-ready", []map[string]any{
		expr(annotationKey(AnnotationNeverReady), "In", "true"),
		expr(".metadata.deletionTimestamp", "DoesNotExist"),
		expr(".status.phase", "In", "Pending"),
	}, tmpl)
}

// podWaitingStage takes pending pods annotated AnnotationWaiting to
// Running with every container waiting (see AnnotationWaiting). No stage
// matches them afterwards.
func podWaitingStage() map[string]any {
	tmpl := `{{ $now := Now }}
{{ $annotations := or .metadata.annotations dict }}
{{ $reason := index $annotations "` + AnnotationWaiting + `" }}
{{ $message := or ( index $annotations "` + AnnotationWaitingMessage + `" ) "" }}
{{ $last := or ( index $annotations "` + AnnotationLastReason + `" ) "" }}
{{ $restarts := or ( index $annotations "` + AnnotationRestarts + `" ) 5 }}
{{ $exitCode := or ( index $annotations "` + AnnotationExitCode + `" ) 137 }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: PodScheduled}
- {lastTransitionTime: {{ $now | Quote }}, status: "False", reason: ContainersNotReady, type: Ready}
- {lastTransitionTime: {{ $now | Quote }}, status: "False", reason: ContainersNotReady, type: ContainersReady}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
{{ if $last }}
  restartCount: {{ $restarts }}
  lastState:
    terminated:
      exitCode: {{ $exitCode }}
      reason: {{ $last | Quote }}
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ else }}
  restartCount: 0
{{ end }}
  state:
    waiting:
      reason: {{ $reason | Quote }}
      message: {{ $message | Quote }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
`
	return podStage("onprem-pod-waiting", []map[string]any{
		expr(annotationKey(AnnotationWaiting), "Exists"),
		expr(".metadata.deletionTimestamp", "DoesNotExist"),
		expr(".status.phase", "In", "Pending"),
	}, tmpl)
}
