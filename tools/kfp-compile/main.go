// Command kfp-compile runs KFP 2.17.0's own backend compiler (the path the KFP API
// server takes for a run: backend/src/apiserver/template/v2_template.go
// NewV2SpecTemplate + (*V2Spec).RunWorkflow -> argocompiler.Compile) on committed
// pipeline YAML files, then Argo v4.0.5's workflow/validate on the result, and
// prints one JSON object per pipeline.
//
// Usage: kfp-compile [-params JSON] [-defaults WORKFLOW_DEFAULTS_YAML] [-out DIR] FILE...
//
//	-params    run parameters (JSON object) passed as the run's RuntimeConfig.Parameters
//	-defaults  the workflow-controller-configmap `workflowDefaults` value; used (1) as
//	           wfDefaults for validate.ValidateWorkflow, as the controller does
//	           (workflow/controller/operator.go:4323 at v4.0.5), and (2) for the
//	           per-template strategic merge of spec.templateDefaults the controller does
//	           (operator.go mergedTemplateDefaultsInto), reported as effectiveRetryStrategy.
//	-out       directory to write each compiled Workflow (YAML) to.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	wfv1 "github.com/argoproj/argo-workflows/v4/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v4/workflow/validate"
	"github.com/kubeflow/pipelines/backend/src/apiserver/config/proxy"
	"github.com/kubeflow/pipelines/backend/src/apiserver/model"
	"github.com/kubeflow/pipelines/backend/src/apiserver/template"
	"github.com/kubeflow/pipelines/backend/src/common/util"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

type result struct {
	File         string     `json:"file"`
	Pipeline     string     `json:"pipeline,omitempty"`
	PlatformSpec bool       `json:"kubernetesPlatformSpec"`
	Compile      status     `json:"compile"`
	Validate     status     `json:"validate"`
	ValidateDefs *status    `json:"validateWithWorkflowDefaults,omitempty"`
	Templates    []tmplInfo `json:"templates,omitempty"`
	Output       string     `json:"output,omitempty"`
}

type status struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

type tmplInfo struct {
	Name            string              `json:"name"`
	Kind            string              `json:"kind"`
	RetryStrategy   *wfv1.RetryStrategy `json:"retryStrategy"`
	Effective       *wfv1.RetryStrategy `json:"effectiveRetryStrategy,omitempty"`
	EffectivePolicy string              `json:"effectiveRetryPolicyActual,omitempty"`
	Tasks           []taskInfo          `json:"dagTasks,omitempty"`
}

type taskInfo struct {
	Name     string            `json:"name"`
	Template string            `json:"template"`
	Depends  string            `json:"depends,omitempty"`
	Hooks    map[string]string `json:"hooks,omitempty"`
	When     string            `json:"when,omitempty"`
}

func main() {
	params := flag.String("params", "", "run parameters JSON")
	defaultsPath := flag.String("defaults", "", "workflowDefaults YAML (configmap value)")
	outDir := flag.String("out", "", "write compiled workflows here")
	flag.Parse()
	// The API server does proxy.InitializeConfigWithEnv() at start-up
	// (apiserver/main.go:653); here: no proxy, as in a cluster without HTTP(S)_PROXY.
	proxy.InitializeConfig("", "", "")

	var defaults *wfv1.Workflow
	if *defaultsPath != "" {
		raw, err := os.ReadFile(*defaultsPath)
		check(err)
		defaults = &wfv1.Workflow{}
		check(yaml.Unmarshal(raw, defaults))
	}
	failed := false
	for _, path := range flag.Args() {
		r := run(path, *params, defaults, *outDir)
		if !r.Compile.OK || !r.Validate.OK || (r.ValidateDefs != nil && !r.ValidateDefs.OK) {
			failed = true
		}
		b, err := json.Marshal(r)
		check(err)
		fmt.Println(string(b))
	}
	if failed {
		os.Exit(1)
	}
}

func run(path, params string, defaults *wfv1.Workflow, outDir string) (r result) {
	r.File = path
	raw, err := os.ReadFile(path)
	if err != nil {
		r.Compile.Error = err.Error()
		return
	}
	// The API server's own parsing of an uploaded pipeline (v2_template.go:195).
	spec, err := template.NewV2SpecTemplate(raw, template.TemplateOptions{})
	if err != nil {
		r.Compile.Error = "NewV2SpecTemplate: " + err.Error()
		return
	}
	r.Pipeline = spec.V2PipelineName()
	r.PlatformSpec = spec.PlatformSpec() != nil && spec.PlatformSpec().GetPlatforms()["kubernetes"] != nil
	// The API server's run creation (v2_template.go:327 RunWorkflow -> argocompiler.Compile).
	exec, err := spec.RunWorkflow(&model.Run{
		DisplayName: r.Pipeline + "-run",
		Namespace:   "kubeflow",
		PipelineSpec: model.PipelineSpec{
			RuntimeConfig: model.RuntimeConfig{Parameters: model.LargeText(params)},
		},
	}, template.RunWorkflowOptions{RunID: "00000000-0000-0000-0000-000000000001", RunAt: 0})
	if err != nil {
		r.Compile.Error = err.Error()
		return
	}
	r.Compile.OK = true
	wf := exec.(*util.Workflow).Workflow

	if outDir != "" {
		b, err := yaml.Marshal(wf)
		check(err)
		out := filepath.Join(outDir, strings.TrimSuffix(filepath.Base(path), ".yaml")+".argo.yaml")
		check(os.WriteFile(out, b, 0o644))
		r.Output = out
	}

	// KFP's own call (common/util/workflow.go:859 (*Workflow).Validate): nil defaults.
	if err := validate.ValidateWorkflow(util.ArgoContext(), nil, nil, wf.DeepCopy(), nil, validate.ValidateOpts{}); err != nil {
		r.Validate.Error = err.Error()
	} else {
		r.Validate.OK = true
	}
	// The controller's one-time validation (operator.go:4323 at v4.0.5), with workflowDefaults.
	if defaults != nil {
		s := status{}
		if err := validate.ValidateWorkflow(util.ArgoContext(), nil, nil, wf.DeepCopy(), defaults, validate.ValidateOpts{}); err != nil {
			s.Error = err.Error()
		} else {
			s.OK = true
		}
		r.ValidateDefs = &s
	}

	for _, t := range wf.Spec.Templates {
		ti := tmplInfo{Name: t.Name, Kind: string(t.GetType()), RetryStrategy: t.RetryStrategy}
		if defaults != nil && defaults.Spec.TemplateDefaults != nil {
			merged := mergeDefaults(defaults.Spec.TemplateDefaults, t)
			ti.Effective = merged.RetryStrategy
			if merged.RetryStrategy != nil {
				ti.EffectivePolicy = string(merged.RetryStrategy.RetryPolicyActual())
			}
		}
		if t.DAG != nil {
			for _, task := range t.DAG.Tasks {
				ti2 := taskInfo{Name: task.Name, Template: task.Template, Depends: task.Depends, When: task.When}
				if len(task.Hooks) > 0 {
					ti2.Hooks = map[string]string{}
					for k, h := range task.Hooks {
						ti2.Hooks[string(k)] = h.Template
					}
				}
				ti.Tasks = append(ti.Tasks, ti2)
			}
		}
		r.Templates = append(r.Templates, ti)
	}
	return
}

// mergeDefaults does what the controller's mergedTemplateDefaultsInto does
// (argo-workflows v4.0.5 workflow/controller/operator.go, see tools/argo-merge):
// json(templateDefaults) strategic-merged with json(template).
func mergeDefaults(defaults *wfv1.Template, t wfv1.Template) wfv1.Template {
	d, err := json.Marshal(defaults)
	check(err)
	tj, err := json.Marshal(t)
	check(err)
	merged, err := strategicpatch.StrategicMergePatch(d, tj, wfv1.Template{})
	check(err)
	out := wfv1.Template{}
	check(json.Unmarshal(merged, &out))
	return out
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfp-compile:", err)
		os.Exit(2)
	}
}
