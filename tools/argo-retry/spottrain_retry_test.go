// Package controller: this file is not built here. `make argo-retry` compiles it into
// Argo v4.0.5's own workflow/controller package (go test -overlay, the module cache left
// untouched), so that a KFP-shaped Workflow runs through that package's real operate
// loop: the workflowDefaults merge into the workflow (setExecWorkflow), the template
// defaults merge into every template (mergedTemplateDefaultsInto, operator.go:2133),
// parameter substitution (ProcessArgs, :2154), the DAG engine, pod creation, pod status
// assessment (assessNodeStatus/inferFailedReason, :1709), "pod deleted" (:1289),
// processNodeRetries (:978) and its retryStrategy.expression (:1141). Only the kubelet
// is played: each pod's end is written into the fake clientset as Argo's own tests do
// (controller_test.go makePodsPhase/deletePods).
//
// Input: $SPOTTRAIN_RETRY_CASES, a JSON file written by tests/system/kfp/test_argo_retry_controller.py
// (policies as workflowDefaults YAML, tasks, scenarios); output: one JSON object per
// case in $SPOTTRAIN_RETRY_OUT.
package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apiv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	wfv1 "github.com/argoproj/argo-workflows/v4/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v4/util/logging"
)

type spottrainScenario struct {
	Name string `json:"name"`
	// "fail": the pod ends Failed as below; "vanish": the pod object is deleted.
	Action       string `json:"action"`
	ExitCode     int32  `json:"exit_code"`
	Reason       string `json:"reason"`        // the main container's terminated reason
	Message      string `json:"message"`       // its terminated message (/dev/termination-log)
	PodMessage   string `json:"pod_message"`   // pod.status.message (the kubelet's)
	PodReason    string `json:"pod_reason"`    // pod.status.reason
	Disruption   string `json:"disruption"`    // a DisruptionTarget condition's reason
	FailDriver   bool   `json:"fail_driver"`   // the task's driver pod fails (exit 1) instead
	SucceedAfter int    `json:"succeed_after"` // executions that fail before one succeeds (0: all fail)
	// The containers are still running when the pod is marked Failed (PodGC after its
	// node was deleted: the kubelet that would end them is gone).
	StillRunning bool `json:"still_running"`
}

type spottrainTask struct {
	Name string `json:"name"`
	// KFP set_retry(num_retries=...); negative: no set_retry.
	Retries int `json:"retries"`
}

type spottrainCases struct {
	Policies  map[string]string   `json:"policies"` // name -> workflowDefaults YAML ("" = none)
	Tasks     []spottrainTask     `json:"tasks"`
	Scenarios []spottrainScenario `json:"scenarios"`
}

type spottrainResult struct {
	Policy     string         `json:"policy"`
	Task       string         `json:"task"`
	Scenario   string         `json:"scenario"`
	Executions int            `json:"executions"` // pods of the task's executor (system-container-impl)
	Pods       map[string]int `json:"pods"`       // pods per template
	Nodes      map[string]int `json:"nodes"`      // DAG and pod nodes per template (retries included)
	Phase      string         `json:"phase"`
	Message    string         `json:"message"`
	// The executor pod nodes' messages and exit codes (what lastRetry.* read), in order.
	PodMessages  []string `json:"pod_messages"`
	PodExitCodes []string `json:"pod_exit_codes"`
	Error        string   `json:"error,omitempty"`
}

// spottrainWorkflow is what KFP 2.17.0's compiler makes of a one-task pipeline
// (kubeflow/pipelines 2.17.0, backend/src/v2/compiler/argocompiler): the
// `entrypoint` DAG runs `root-driver` then the `root` DAG (dag.go:140-180, argo.go:581);
// `root` runs `<task>-driver` then `<task>` (dag.go:293-336), a DAG template
// `[retry-]system-container-executor` with one task `executor` running
// `[retry-]system-container-impl`, the pod (container.go:364-433); with set_retry the
// names take `retry-`, both templates take the retry-* inputs and the pod template a
// retryStrategy whose limit and backoff are those inputs (container.go:372,577-586,
// 667-686). Stand-ins: the drivers are plain containers, and their outputs
// (pod-spec-patch, cached-decision) literals, since retries read neither.
func spottrainWorkflow(task spottrainTask) string {
	prefix, retryInputs, retryArgs, retryDAGArgs, retryStrategy := "", "", "", "", ""
	if task.Retries >= 0 {
		prefix = "retry-"
		for _, n := range []string{"retry-max-count", "retry-backoff-duration", "retry-backoff-factor", "retry-backoff-max-duration"} {
			retryInputs += fmt.Sprintf("      - name: %s\n", n)
			retryArgs += fmt.Sprintf("          - {name: %s, value: '{{inputs.parameters.%s}}'}\n", n, n)
		}
		// KFP's set_retry defaults: backoff 0s, factor 2, max 3600 s (container.go:615-645).
		retryDAGArgs = fmt.Sprintf(`          - {name: retry-max-count, value: '%d'}
          - {name: retry-backoff-duration, value: '0'}
          - {name: retry-backoff-factor, value: '2'}
          - {name: retry-backoff-max-duration, value: '3600'}
`, task.Retries)
		retryStrategy = `    retryStrategy:
      limit: '{{inputs.parameters.retry-max-count}}'
      backoff:
        duration: '{{inputs.parameters.retry-backoff-duration}}'
        factor: '{{inputs.parameters.retry-backoff-factor}}'
        maxDuration: '{{inputs.parameters.retry-backoff-max-duration}}'
`
	}
	dagInputs := strings.ReplaceAll(retryInputs, "      - name: ", "      - default: '0'\n        name: ")
	return fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: kfp-run
  namespace: default
spec:
  entrypoint: entrypoint
  templates:
  - name: entrypoint
    dag:
      tasks:
      - {name: root-driver, template: system-dag-driver}
      - {name: root, template: root, depends: root-driver.Succeeded}
  - name: root
    dag:
      tasks:
      - {name: %[1]s-driver, template: system-container-driver}
      - name: %[1]s
        template: %[2]ssystem-container-executor
        depends: %[1]s-driver.Succeeded
        arguments:
          parameters:
          - {name: pod-spec-patch, value: '{}'}
          - {name: cached-decision, value: 'false'}
%[3]s  - name: %[2]ssystem-container-executor
    inputs:
      parameters:
      - name: pod-spec-patch
      - {name: cached-decision, default: 'false'}
%[4]s    dag:
      tasks:
      - name: executor
        template: %[2]ssystem-container-impl
        when: '{{inputs.parameters.cached-decision}} != true'
        arguments:
          parameters:
          - {name: pod-spec-patch, value: '{{inputs.parameters.pod-spec-patch}}'}
%[5]s  - name: %[2]ssystem-container-impl
    inputs:
      parameters:
      - name: pod-spec-patch
%[6]s%[7]s    container: {image: gcr.io/ml-pipeline/should-be-overridden-during-runtime, command: [x]}
  - name: system-container-driver
    container: {image: driver, command: [driver]}
  - name: system-dag-driver
    container: {image: driver, command: [driver]}
`, task.Name, prefix, retryDAGArgs, dagInputs, retryArgs, retryInputs, retryStrategy)
}

// spottrainSynced waits until the running pod informer's store holds the pod as ok says:
// its watch delivers the clientset's events on its own goroutine, and an event that
// arrives after our direct store write (a late ADD of the fresh pod) would put back the
// older pod. Ordered events cannot go back once the store shows the newest one.
func spottrainSynced(woc *wfOperationCtx, pod apiv1.Pod, ok func(*apiv1.Pod) bool) {
	store := woc.controller.PodController.TestingPodInformer().GetStore()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		obj, exists, err := store.GetByKey(pod.Namespace + "/" + pod.Name)
		if err == nil && ok(podOrNil(obj, exists)) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	panic("the pod informer never showed " + pod.Name + " as expected")
}

func podOrNil(obj interface{}, exists bool) *apiv1.Pod {
	if !exists {
		return nil
	}
	return obj.(*apiv1.Pod)
}

// spottrainWrite stores the pod as the kubelet's status write would, through the
// clientset and the informer's store as makePodsPhase does (controller_test.go:544-570),
// then waits until the informer shows it.
func spottrainWrite(ctx context.Context, woc *wfOperationCtx, pod apiv1.Pod) {
	updated, err := woc.controller.kubeclientset.CoreV1().Pods(pod.Namespace).Update(ctx, &pod, metav1.UpdateOptions{})
	if err != nil {
		panic(err)
	}
	if err := woc.controller.PodController.TestingPodInformer().GetStore().Update(updated); err != nil {
		panic(err)
	}
	spottrainSynced(woc, pod, func(p *apiv1.Pod) bool { return p != nil && p.Status.Phase == pod.Status.Phase })
}

// spottrainRunning starts the pod's containers (a pod that will vanish with its node
// was running when it did).
func spottrainRunning(ctx context.Context, woc *wfOperationCtx, pod apiv1.Pod) {
	spottrainSynced(woc, pod, func(p *apiv1.Pod) bool { return p != nil })
	pod.Status.Phase = apiv1.PodRunning
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, apiv1.ContainerStatus{
			Name: c.Name, State: apiv1.ContainerState{Running: &apiv1.ContainerStateRunning{}}})
	}
	spottrainWrite(ctx, woc, pod)
}

// spottrainEnd plays the kubelet for one pod: Failed with the scenario's statuses, or
// Succeeded, or (vanish) gone, as deletePods does (controller_test.go:575-590).
func spottrainEnd(ctx context.Context, woc *wfOperationCtx, pod apiv1.Pod, sc spottrainScenario, fail bool) {
	spottrainSynced(woc, pod, func(p *apiv1.Pod) bool { return p != nil })
	if fail && sc.Action == "vanish" {
		if err := woc.controller.kubeclientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			panic(err)
		}
		if err := woc.controller.PodController.TestingPodInformer().GetStore().Delete(&pod); err != nil {
			panic(err)
		}
		spottrainSynced(woc, pod, func(p *apiv1.Pod) bool { return p == nil })
		return
	}
	code, reason, message := int32(0), "Completed", ""
	pod.Status.Phase = apiv1.PodSucceeded
	if fail {
		pod.Status.Phase = apiv1.PodFailed
		code, reason, message = sc.ExitCode, sc.Reason, sc.Message
		pod.Status.Message, pod.Status.Reason = sc.PodMessage, sc.PodReason
		if sc.Disruption != "" {
			pod.Status.Conditions = append(pod.Status.Conditions, apiv1.PodCondition{
				Type: apiv1.DisruptionTarget, Status: apiv1.ConditionTrue, Reason: sc.Disruption})
		}
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		state := &apiv1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}
		if c.Name == "main" {
			state = &apiv1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: message}
		}
		cs := apiv1.ContainerStatus{Name: c.Name, State: apiv1.ContainerState{Terminated: state}}
		if fail && sc.StillRunning {
			cs.State = apiv1.ContainerState{Running: &apiv1.ContainerStateRunning{}}
		}
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, cs)
	}
	spottrainWrite(ctx, woc, pod)
	if !fail {
		woc.wf.Status.MarkTaskResultComplete(ctx, woc.nodeID(&pod))
	}
}

func spottrainRun(t *testing.T, policy string, defaults string, task spottrainTask, sc spottrainScenario) spottrainResult {
	ctx := logging.TestContext(t.Context())
	cancel, controller := newController(ctx)
	defer cancel()
	res := spottrainResult{Policy: policy, Task: task.Name, Scenario: sc.Name, Pods: map[string]int{}, Nodes: map[string]int{}}
	if defaults != "" {
		var wfDefaults wfv1.Workflow
		if err := yaml.Unmarshal([]byte(defaults), &wfDefaults); err != nil {
			res.Error = err.Error()
			return res
		}
		controller.Config.WorkflowDefaults = &wfDefaults
	}
	wf := wfv1.MustUnmarshalWorkflow(spottrainWorkflow(task))
	seen := map[string]bool{}
	// A node that goes away takes a running pod with it: Running this round, gone the next.
	vanishing := map[string]bool{}
	executions := 0
	for round := 0; round < 3000 && !wf.Status.Phase.Completed(); round++ {
		woc := newWorkflowOperationCtx(ctx, wf, controller)
		woc.operate(ctx)
		wf = woc.wf
		pods, err := listPods(ctx, woc)
		if err != nil {
			panic(err)
		}
		for _, pod := range pods.Items {
			if vanishing[pod.Name] {
				delete(vanishing, pod.Name)
				spottrainEnd(ctx, woc, pod, sc, true)
				continue
			}
			if seen[pod.Name] {
				continue
			}
			seen[pod.Name] = true
			node, err := wf.Status.Nodes.Get(woc.nodeID(&pod))
			if err != nil {
				panic(err)
			}
			tmpl := node.TemplateName
			res.Pods[tmpl]++
			fail := false
			switch {
			case strings.HasSuffix(tmpl, "system-container-impl"):
				executions++
				fail = sc.SucceedAfter == 0 || executions <= sc.SucceedAfter
			case tmpl == "system-container-driver":
				fail = sc.FailDriver
			}
			end := sc
			if fail && sc.FailDriver {
				end = spottrainScenario{Action: "fail", ExitCode: 1, Reason: "Error"}
			}
			if fail && end.Action == "vanish" {
				vanishing[pod.Name] = true
				spottrainRunning(ctx, woc, pod)
				continue
			}
			spottrainEnd(ctx, woc, pod, end, fail)
		}
	}
	for _, n := range wf.Status.Nodes {
		if n.Type == wfv1.NodeTypePod || n.Type == wfv1.NodeTypeDAG {
			res.Nodes[n.TemplateName]++
		}
		if n.Type == wfv1.NodeTypePod && strings.HasSuffix(n.TemplateName, "system-container-impl") && len(res.PodMessages) < 3 {
			res.PodMessages = append(res.PodMessages, n.Message)
			code := ""
			if n.Outputs != nil && n.Outputs.ExitCode != nil {
				code = *n.Outputs.ExitCode
			}
			res.PodExitCodes = append(res.PodExitCodes, code)
		}
	}
	res.Executions = executions
	if !wf.Status.Phase.Completed() {
		res.Error = "the workflow did not end within 3000 rounds"
	}
	res.Phase = string(wf.Status.Phase)
	res.Message = wf.Status.Message
	return res
}

func TestSpottrainRetries(t *testing.T) {
	path := os.Getenv("SPOTTRAIN_RETRY_CASES")
	if path == "" {
		t.Skip("SPOTTRAIN_RETRY_CASES not set")
	}
	// Argo's own knob: a pod that vanished within this long of its start is waited for
	// (operator.go:1277, :1305); the fake pods here start and end in one round.
	t.Setenv("RECENTLY_STARTED_POD_DURATION", "0s")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases spottrainCases
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for name, defaults := range cases.Policies {
		for _, task := range cases.Tasks {
			for _, sc := range cases.Scenarios {
				out, err := json.Marshal(spottrainRun(t, name, defaults, task, sc))
				if err != nil {
					t.Fatal(err)
				}
				lines = append(lines, string(out))
			}
		}
	}
	if err := os.WriteFile(os.Getenv("SPOTTRAIN_RETRY_OUT"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
