"""Pre-flight guards: refuse, before anything is submitted, runs that cannot work.

Each guard raises :class:`GuardError` with one line that names the offending
value and says what to do. They run at compile time on the settings and again at
submit time on the compiled template and the run's parameters, so a hand-edited
or stale template is caught too.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from spottrain import images
from spottrain.pipelines import task_check, templates
from spottrain.pipelines.errors import GuardError
from spottrain.placement import MAX_WORKERS

PERSISTENT_PREFIXES = ("gs://", "/gcs/")
_TIMEOUT = re.compile(r"^([0-9]+(\.[0-9]{1,9})?)s$")
# MWMS uses pools 0 (chief) and 1 (workers); 2 is a reduction server, 3 an evaluator.
_MWMS_POOLS = (0, 1)


def check_timeout(timeout: str) -> None:
    """A Vertex job needs a positive timeout, or a hung job bills until cancelled."""
    match = _TIMEOUT.match(timeout or "")
    if not match or float(match.group(1)) <= 0:
        raise GuardError(
            f"Vertex job timeout={timeout!r}: set a positive duration like '86400s'; without "
            "one a hung MultiWorkerMirroredStrategy job runs (and bills) until cancelled"
        )


def _machine(spec: Mapping[str, Any]) -> tuple[str, int]:
    machine = spec.get("machine_spec") or spec.get("machineSpec") or {}
    kind = machine.get("accelerator_type") or machine.get("acceleratorType") or ""
    count = machine.get("accelerator_count") or machine.get("acceleratorCount") or 0
    return str(kind), int(count) if kind else 0


def check_worker_pools(specs: Iterable[Mapping[str, Any]]) -> None:
    """MWMS needs the same accelerator type and count in the chief and worker pools.

    With unequal pools the strategy blocks forever creating mirrored variables: no
    error, no log, a bill.
    """
    pools = [
        (i, _machine(spec))
        for i, spec in enumerate(specs)
        if i in _MWMS_POOLS and spec and int(spec.get("replica_count", spec.get("replicaCount", 1)))
    ]
    if len(pools) < 2:
        return
    (_, chief), (_, worker) = pools[0], pools[1]
    if chief != worker:

        def show(m: tuple[str, int]) -> str:
            return f"{m[1]} x {m[0]}" if m[0] else "no accelerator"

        raise GuardError(
            f"worker pool 1 has {show(worker)} but pool 0 (chief) has {show(chief)}: "
            "MultiWorkerMirroredStrategy needs equal accelerators on every worker or it hangs"
        )


def check_image_reference(image: str) -> None:
    """An image the nodes cannot pull fails every pod at ImagePullBackOff, after submit."""
    if problem := images.reference_problem(image):
        raise GuardError(f"--image {image!r} {problem}")


def check_image_gpu(image: str, gpus: int) -> None:
    """GPUs with a CPU-only image train on CPU at GPU prices."""
    if gpus and images.is_cpu_only(image):
        raise GuardError(
            f"{gpus} GPU(s) requested but image {image!r} is CPU-only: use a CUDA build "
            "(tf-gpu.*, tensorflow/tensorflow:*-gpu, or `make image`) or request no GPUs"
        )


def check_checkpoint_dir(checkpoint_dir: str, retries: int, name: str = "checkpoint_dir") -> None:
    """Retries resume only from a checkpoint that outlives the pod (``name``: its parameter)."""
    if retries and not str(checkpoint_dir).startswith(PERSISTENT_PREFIXES):
        raise GuardError(
            f"{name}={checkpoint_dir!r} is not persistent but the train task retries "
            f"{retries} time(s): a new pod would restart from step 0; use gs://... or /gcs/..."
        )


def _coerce(name: str, kind: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        if kind == "NUMBER_INTEGER":
            return int(value)
        if kind == "NUMBER_DOUBLE":
            return float(value)
        if kind == "BOOLEAN":
            lowered = value.lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return lowered in ("true", "1", "yes")
        if kind in ("LIST", "STRUCT"):
            return json.loads(value)
    except ValueError:
        raise GuardError(
            f"parameter {name}={value!r} is not a valid {kind.lower().replace('number_', '')}"
        ) from None
    return value


def check_parameters(spec: Mapping, params: Mapping[str, Any]) -> dict[str, Any]:
    """Refuses unknown or missing parameter names; converts ``"1"``-style strings.

    Returns:
        The parameters with values of the template's types.
    """
    types = templates.parameter_types(spec)
    for name in params:
        if name not in types:
            close = difflib.get_close_matches(name, types, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            if name.lower() in types and name != name.lower():
                raise GuardError(
                    f"pipeline parameter {name!r}: names are lower case, use "
                    f"{name.lower()}=... (make passes on only lower-case variables)"
                )
            raise GuardError(
                f"unknown pipeline parameter {name!r}: {hint}known: {', '.join(sorted(types))}"
            )
    missing = [n for n in templates.required_parameters(spec) if n not in params]
    if missing:
        raise GuardError(f"missing required pipeline parameter(s): {', '.join(missing)}")
    return {name: _coerce(name, types[name], value) for name, value in params.items()}


# Stand-ins for the inputs the pipeline itself fills in (the copied data, the model
# artifact): spottrain.trainer.config.validate only checks that they are set.
_PIPELINE_FILLED = {"data_dir": "<the copied data_src>", "model_dir": "<the model artifact>"}
_FLAG = re.compile(r"--([a-z][a-z0-9-]*)")


def check_values(spec: Mapping, params: Mapping[str, Any]) -> None:
    """Refuses parameter *values* the run would fail on, before anything is submitted.

    The training settings are checked by the trainer's own rules, from one source:
    the parameters that are training settings (``TrainSettings`` and
    ``checkpoint_dir``) become the train component's flags
    (``spottrain.runtime.train.trainer_flags``), which ``spottrain.trainer.config``
    parses and validates (the built-in image task's settings included) with neither
    data nor TensorFlow. The
    pipeline-only ``local_workers`` and empty required parameters are checked here.

    Args:
        spec: The compiled PipelineSpec.
        params: The run's parameters, already converted to the template's types.
    """
    types = templates.parameter_types(spec)
    for name in templates.required_parameters(spec):
        if types[name] == "STRING" and not str(params.get(name, "")).strip():
            raise GuardError(f"pipeline parameter {name} is empty: pass {name}=...")
    values = {**templates.parameter_defaults(spec), **params}
    if "workers" in values and not 1 <= values["workers"] <= MAX_WORKERS:
        raise GuardError(
            f"pipeline parameter workers={values['workers']}: expected 1 to {MAX_WORKERS}"
        )
    if values.get("unschedulable_timeout", 0) < 0:
        raise GuardError(
            f"pipeline parameter unschedulable_timeout={values['unschedulable_timeout']} "
            "must be >= 0"
        )
    if "local_workers" in values and values["local_workers"] < 1:
        raise GuardError(
            f"pipeline parameter local_workers={values['local_workers']} must be >= 1 "
            "(worker processes per node)"
        )
    from spottrain.exits import ConfigError
    from spottrain.runtime.train import trainer_flags
    from spottrain.runtime.train_settings import TrainSettings
    from spottrain.trainer import config

    # What the train task gets, whatever the pipeline calls its parameters (or constants).
    received = {**values, **templates.train_task_inputs(spec, params)}
    if not set(TrainSettings.names()) & set(received):
        return  # not a training pipeline
    settings = TrainSettings.from_params(received)
    checkpoint_dirs = templates.checkpoint_dirs(spec, params)
    ckpt = checkpoint_dirs[0][1] if checkpoint_dirs else ""
    try:
        # The flags the train component would pass, parsed and checked by the trainer.
        flags = trainer_flags(
            data_dir=_PIPELINE_FILLED["data_dir"],
            checkpoint_dir=ckpt,
            model_dir=_PIPELINE_FILLED["model_dir"],
            settings=settings,
        )
        config.validate(config.parse_args(flags, {}))
    except ConfigError as e:
        # The trainer's message names its flags: name the pipeline parameters instead.
        def param(m: re.Match) -> str:
            name = m.group(1).replace("-", "_")
            if name == "checkpoint_dir" and checkpoint_dirs:
                return checkpoint_dirs[0][0]  # whatever the pipeline calls it
            return name if name in values else m.group(0)

        raise GuardError(
            f"pipeline parameter refused by the trainer: {_FLAG.sub(param, str(e))}"
        ) from None


def check_make_variables(spec: Mapping, names: Iterable[str]) -> None:
    """Refuses upper-case make variables named like a pipeline parameter.

    ``make run-gke`` passes only lower-case command-line variables on as parameters,
    so ``TRAIN_STEPS=5`` would be dropped silently; the Makefile names the others here.
    """
    types = templates.parameter_types(spec)
    for name in names:
        if name.lower() in types:
            raise GuardError(
                f"make variable {name} is not a pipeline parameter: parameter names are "
                f"lower case, use {name.lower()}=..."
            )


def check_retry_windows(spec: Mapping, platform: Mapping | None) -> None:
    """Every retried task's retry window must cover the run's timeout (KFP OSS only).

    On KFP OSS ``backoffMaxDuration`` becomes Argo's ``backoff.maxDuration``, a window
    counted from the task's first attempt (see ``placement.check_retry_window``), and
    the platform spec's ``pipelineConfig.activeDeadlineSeconds`` becomes the run's
    deadline (kubeflow/pipelines backend/src/v2/compiler/argocompiler/argo.go:146,
    2.17.0). A template without a platform spec is Vertex's, whose retries are not Argo's.
    """
    if platform is None:
        return
    kubernetes = (platform.get("platforms") or {}).get("kubernetes") or {}
    deadline = (kubernetes.get("pipelineConfig") or {}).get("activeDeadlineSeconds")
    for name, task in templates.tasks(spec):
        policy = task.get("retryPolicy") or {}
        if not int(policy.get("maxRetryCount", 0)):
            continue
        window = policy.get("backoffMaxDuration", "0s")
        if deadline is None:
            raise GuardError(
                f"task {name!r} retries within backoffMaxDuration={window} but the template "
                "sets no run timeout (pipelineConfig.activeDeadlineSeconds): give "
                "@dsl.pipeline(pipeline_config=dsl.PipelineConfig(active_deadline_seconds=...))"
                " at most that window, or `make compile` for the shipped pipelines"
            )
        if templates.seconds(window) < float(deadline):
            raise GuardError(
                f"task {name!r} has backoffMaxDuration={window}, shorter than the run timeout "
                f"{deadline}s: Argo counts it from the first attempt and retries no preemption "
                "after it; recompile with a retry window >= the run timeout"
            )


# KFP's trigger strategy of exit tasks and ignore_upstream_failure() tasks.
EXIT_STRATEGY = "ALL_UPSTREAM_TASKS_COMPLETED"


def _upstream(task: Mapping) -> set[str]:
    """A task's upstream tasks as the KFP backend sees them.

    Its ``dependentTasks`` plus the producers of its inputs, which the backend adds
    itself: kubeflow/pipelines backend/src/v2/compiler/argocompiler/dag.go:659-706
    (2.17.0) addImplicitDependencies, e.g. :686 `case
    *pipelinespec.TaskInputsSpec_InputParameterSpec_TaskOutputParameter:`. A
    ``dsl.If`` condition or a ``dsl.ParallelFor`` iterator reads the producer's
    output through such an input, so it is covered too.
    """
    found = set(task.get("dependentTasks") or [])
    inputs = task.get("inputs") or {}
    for arg in (inputs.get("parameters") or {}).values():
        producer = (arg.get("taskOutputParameter") or {}).get("producerTask")
        if producer:
            found.add(producer)
    for arg in (inputs.get("artifacts") or {}).values():
        producer = (arg.get("taskOutputArtifact") or {}).get("producerTask")
        if producer:
            found.add(producer)
    return found


def check_exit_tasks(spec: Mapping) -> None:
    """Refuses a graph KFP OSS cannot run, or runs otherwise, because of an exit task.

    The backend compiles each task with trigger strategy ALL_UPSTREAM_TASKS_COMPLETED
    (a ``dsl.ExitHandler`` exit task, or ``ignore_upstream_failure()``) into an Argo
    exit lifecycle hook on each of its upstream tasks, never into a DAG task
    (kubeflow/pipelines backend/src/v2/compiler/argocompiler/dag.go, 2.17.0):
      :72 `if kfpTask.GetTriggerPolicy().GetStrategy().String() != "ALL_UPSTREAM_TASKS_COMPLETED" {`
      :90-91 `for _, dep := range deps {` / `taskToExitTemplate[dep] = name`
      :124-126 skips it when building the DAG's tasks, and :142-143 refuses a DAG of
      exit tasks only, "must contain one or more non-exit tasks".
    So:
    - a task that depends on it names a task the Argo DAG does not have, which Argo
      rejects: argoproj/argo-workflows workflow/validate/validate.go:1366-1368
      `"templates.%s sorting failed: %s"` with util/sorting/topological_sorting.go:26
      `"invalid dependency %s"` (v4.0.5);
    - an exit task with several upstream tasks is hooked on (runs after) each of
      them, and one with none is never hooked, so it never runs;
    - two exit tasks on one upstream task: the map at :91 keeps one (the tasks are
      visited in name order, :58 `sort.Strings(keys)`), and the other compiles, is
      validated and never runs.
    All of it shown with KFP 2.17.0's compiler and Argo v4.0.5's validation
    (docs/verification.md).
    """
    for dag_name, dag in templates.dags(spec):
        tasks = dag.get("tasks") or {}
        exits = {
            name
            for name, task in tasks.items()
            if (task.get("triggerPolicy") or {}).get("strategy") == EXIT_STRATEGY
        }
        if not exits:
            continue
        where = "the pipeline" if dag_name == "root" else dag_name
        for name, task in sorted(tasks.items()):
            bad = sorted(_upstream(task) & exits)
            if bad:
                raise GuardError(
                    f"in {where}, task {name!r} depends on {bad[0]!r}, which KFP OSS runs as an "
                    f"Argo exit hook, not a DAG task: Argo rejects the run (sorting failed: "
                    f"invalid dependency {bad[0]}); nothing may consume an exit task's outputs"
                )
        hooked: dict[str, str] = {}
        for name in sorted(exits):
            upstream = sorted(_upstream(tasks[name]))
            if len(upstream) != 1:
                raise GuardError(
                    f"in {where}, exit task {name!r} has upstream tasks {upstream}: KFP OSS "
                    "hooks it on each of them (runs it once per task, or never for none)"
                )
            if upstream[0] in hooked:
                first = hooked[upstream[0]]
                raise GuardError(
                    f"in {where}, exit tasks {first!r} and {name!r} both follow "
                    f"{upstream[0]!r}: KFP OSS keeps one exit hook per task, so {first!r} "
                    "would never run; make one exit task (a graph component) that does both"
                )
            hooked[upstream[0]] = name
        if exits == set(tasks):
            raise GuardError(f"in {where}, every task is an exit task: KFP OSS refuses the DAG")


def check_published_image(template: str | Path) -> None:
    """Refuses to send a pipeline that still runs the placeholder image anywhere.

    The committed YAML names ``spottrain.version.IMAGE``, an address no registry
    serves: every pod would stop in ImagePullBackOff (GKE) or the custom job fail
    to pull (Vertex), after the run was created. Checked before any request.
    """
    spec, _ = templates.load_template(template)
    found = templates.placeholder_images(spec)
    if found:
        raise GuardError(
            f"{template} runs the placeholder image {found[0]!r}: push your own with "
            "`make image IMAGE=<region>-docker.pkg.dev/<project>/<repo>/trainer:<tag>` and "
            "compile against it with `make compile IMAGE=...` (docs/deploy.md)"
        )


def preflight(
    template: str | Path,
    params: Mapping[str, Any],
    *,
    local: bool = False,
    make_variables: Iterable[str] = (),
) -> dict[str, Any]:
    """Runs every guard on a compiled template and a run's parameters.

    Args:
        template: The compiled pipeline YAML.
        params: Parameter values (strings from the command line are converted).
        local: A kfp.local run, where retries reuse the same machine, so a local
            checkpoint dir persists across them.
        make_variables: Upper-case make variables of the command line (see
            :func:`check_make_variables`).

    Returns:
        The converted parameters.
    """
    spec, platform = templates.load_template(template)
    check_make_variables(spec, make_variables)
    params = check_parameters(spec, params)
    check_exit_tasks(spec)
    check_retry_windows(spec, platform)
    retries = templates.max_train_retries(spec)
    if not local:
        # Whatever the pipeline calls it: what is wired into the train task.
        for name, checkpoint_dir in templates.checkpoint_dirs(spec, params):
            check_checkpoint_dir(checkpoint_dir, retries, name)
            if templates.job_engine_tasks(spec):
                check_job_engine_checkpoint_dir(checkpoint_dir, name)
    check_values(spec, params)
    check_job_engine_inputs(spec, params)
    if note := task_check.check_task(params):
        print(note, file=sys.stderr)
    gpus = _gpus(spec, platform)
    for image in set(templates.images(spec)):
        check_image_gpu(image, gpus)
    for job in templates.custom_jobs(spec):
        check_timeout(job.get("timeout") or "")
        check_worker_pools(job.get("worker_pool_specs") or [])
    return params


def check_job_engine_inputs(spec: Mapping, params: Mapping[str, Any]) -> None:
    """Refuses what the JobSet launcher would refuse in its pod (exit 64, after the copy).

    The launcher's own checks (:class:`spottrain.runtime.train_job.inputs.GangInputs`,
    which its pod's ``RunInputs`` runs too) on the inputs this run wires into each
    ``train_job`` task: a queue or priority class name, a queue with a pool the queue
    does not choose, ``finish_by``, the timeouts.
    """
    from spottrain.runtime.train_job.inputs import GangInputs, InputError

    names = GangInputs.names()
    for name, values in templates.job_engine_inputs(spec, params):
        if not names <= values.keys():
            continue  # an input wired from another task's output: known at run time only
        try:
            GangInputs(**{key: values[key] for key in names})
        except InputError as err:
            raise GuardError(f"the train task {name!r} would refuse its inputs: {err}") from None


def check_job_engine_checkpoint_dir(checkpoint_dir: str, name: str = "checkpoint_dir") -> None:
    """The Job's pods run on other nodes: only a gs:// checkpoint dir reaches them all."""
    if not checkpoint_dir.startswith("gs://"):
        raise GuardError(
            f"{name}={checkpoint_dir!r}: the JobSet-engine train's pods need a gs:// "
            "folder (a /gcs/ mount exists only in Vertex pods)"
        )


def _gpus(spec: Mapping, platform: Mapping | None) -> int:
    counts = [0]
    for _, task in templates.job_engine_tasks(spec):  # the launcher has none; its pods do
        gpus = task.get("inputs", {}).get("parameters", {}).get("gpus", {})
        counts.append(int(gpus.get("runtimeValue", {}).get("constant") or 0))
    for executor in spec.get("deploymentSpec", {}).get("executors", {}).values():
        accel = executor.get("container", {}).get("resources", {}).get("accelerator", {})
        counts.append(int(float(accel.get("resourceCount") or accel.get("count") or 0)))
    for job in templates.custom_jobs(spec):
        for pool in job.get("worker_pool_specs") or []:
            counts.append(_machine(pool)[1])
    return max(counts)
