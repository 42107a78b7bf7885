// Command argo-merge applies Argo's template-defaults merge to one template's
// retryStrategy, with Argo's own types (v4.0.5, the version KFP 2.17.0 pins) and
// apimachinery's strategic merge, as the workflow controller does for every
// template it runs:
//
//	argoproj/argo-workflows workflow/controller/operator.go (v4.0.5)
//	:2133 `err = woc.mergedTemplateDefaultsInto(resolvedTmpl)`
//	:4470-4485 tmplDefaultsJSON := json.Marshal(applicableDefaults); targetTmplJSON :=
//	json.Marshal(originalTmpl); strategicpatch.StrategicMergePatch(tmplDefaultsJSON,
//	targetTmplJSON, wfv1.Template{}); json.Unmarshal(resultTmpl, originalTmpl)
//
// The method is unexported, so these lines call the same functions in the same
// order. The workflow defaults are parsed from the configmap's value as Argo's
// config parsing does (sigs.k8s.io/yaml into a wfv1.Workflow).
//
// Usage: argo-merge WORKFLOW_DEFAULTS_FILE RETRY_STRATEGY_JSON|-
// Prints the merged retryStrategy as JSON and, on a second line, RetryPolicyActual().
package main

import (
	"encoding/json"
	"fmt"
	"os"

	wfv1 "github.com/argoproj/argo-workflows/v4/pkg/apis/workflow/v1alpha1"
	apiv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: argo-merge WORKFLOW_DEFAULTS_FILE RETRY_STRATEGY_JSON|-")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	check(err)
	var defaults wfv1.Workflow
	check(yaml.Unmarshal(raw, &defaults))
	tmpl := wfv1.Template{Name: "system-container-executor", Container: &apiv1.Container{Image: "x"}}
	if os.Args[2] != "-" {
		tmpl.RetryStrategy = &wfv1.RetryStrategy{}
		check(json.Unmarshal([]byte(os.Args[2]), tmpl.RetryStrategy))
	}
	if defaults.Spec.TemplateDefaults != nil {
		d, err := json.Marshal(defaults.Spec.TemplateDefaults)
		check(err)
		t, err := json.Marshal(tmpl)
		check(err)
		merged, err := strategicpatch.StrategicMergePatch(d, t, wfv1.Template{})
		check(err)
		tmpl = wfv1.Template{}
		check(json.Unmarshal(merged, &tmpl))
	}
	out, err := json.Marshal(tmpl.RetryStrategy)
	check(err)
	policy := ""
	if tmpl.RetryStrategy != nil {
		policy = string(tmpl.RetryStrategy.RetryPolicyActual())
	}
	fmt.Printf("%s\n%s\n", out, policy)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "argo-merge:", err)
		os.Exit(1)
	}
}
