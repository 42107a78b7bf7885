"""The preemptible GKE pipeline: copy data, seed the checkpoint, train on spot GPUs.

Preemption is a task failure to KFP: the train task's retry policy starts a new
pod, and the trainer resumes from the last checkpoint in ``checkpoint_dir``. The
copies are separate idempotent steps, so a retried
train step never re-copies an initial checkpoint over newer ones.

It is compiled once per pool kind (``preemptible`` and ``spot``: GKE labels and
our node-pool command taint them differently), with or without the on-demand
fall-back (:func:`fallback_component`).
"""

import contextlib
import functools
import inspect
from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Metrics, Model

from spottrain.components.gcs_copy.component import gcs_copy
from spottrain.components.train.component import train
from spottrain.pipelines.placement import apply_placement
from spottrain.placement import (
    COPY_PLACEMENT,
    ON_DEMAND_PLACEMENT,
    RUN_TIMEOUT,
    SPOT_POOLS,
    Placement,
    check_retry_window,
    seconds,
)
from spottrain.runtime.train_settings import DEFAULT_SETTINGS, TrainSettings, as_parameters

NAME = "spottrain-gke-preemptible"  # pipeline_name() of the default variant
DESCRIPTION = (
    "Copy data and an initial checkpoint, then train with checkpoints on a {pool} "
    "GPU node pool; KFP retries resume a preempted run from its last checkpoint."
)
# Why the run shows Failed after the fall-back finished the training: the exit task
# is an Argo exit hook on the handler's DAG task (see fallback_component), not a DAG
# task, so the root DAG's phase is its leaf task's, the failed handler:
#   argoproj/argo-workflows workflow/controller/dag.go:219 (v4.0.5) `result = branchPhase`
#   in assessDAGPhase over the DAG's target tasks; operator.go:401
#   `wfv1.NodeFailed:    wfv1.WorkflowFailed,` and :513-514 keep it Failed;
# and KFP's run state is that workflow phase:
#   kubeflow/pipelines backend/src/apiserver/resource/resource_manager.go:1537 (2.17.0)
#   `state := model.RuntimeState(string(execStatus.Condition())).ToV2()`.
FALLBACK_DESCRIPTION = (
    " If the spot training fails for good, an exit handler resumes it on the on-demand "
    "pool (the run still shows Failed: see docs/gke.md)."
)


def pipeline_name(pool: str = "preemptible", fallback: bool = False) -> str:
    """The KFP pipeline name of a variant, e.g. ``spottrain-gke-spot-fallback``.

    One name per pipeline from make target to file: ``make run-gke`` → CLI
    ``run-gke`` → ``pipelines/gke.py`` → ``spottrain_gke_<pool>.yaml`` → this.
    """
    return f"spottrain-gke-{pool}" + ("-fallback" if fallback else "")


class Outputs(NamedTuple):
    """The pipeline's outputs."""

    model: Model
    metrics: Metrics


def copy_inputs(
    *,
    data_src: str,
    data_dst: str,
    initial_checkpoint: str,
    checkpoint_dir: str,
    apply=lambda task: task,
) -> tuple[dsl.PipelineTask, dsl.PipelineTask]:
    """Adds the two copy steps; ``apply`` places them.

    Returns:
        The data copy (its ``copied`` output feeds training) and the checkpoint seed.
    """
    data = gcs_copy(src=data_src, dst=data_dst).set_display_name("copy data")
    seed = gcs_copy(
        src=initial_checkpoint, dst=checkpoint_dir, no_clobber=True, allow_empty=True
    ).set_display_name("copy initial checkpoint (no-clobber)")
    for task in (data, seed):
        # Same inputs, same result: caching would also skip a needed re-seed after a
        # user deletes checkpoint_dir, so these always run (they are cheap no-ops then).
        apply(task).set_caching_options(False)
    return data, seed


def build(
    train_placement: Placement | None = None,
    copy_placement: Placement | None = None,
    fallback: Placement | None = None,
    name: str = "",
    run_timeout: str = RUN_TIMEOUT,
):
    """Builds the preemptible pipeline for a compile-time placement.

    Args:
        train_placement: Where training runs; default ``Placement()`` (the
            preemptible pool, 1 T4, 48G, 5 retries with exponential backoff).
        copy_placement: Where the copies (and the fall-back's CPU decision) run;
            default ``COPY_PLACEMENT`` tolerating the training's pool.
        fallback: When set, an exit handler resumes the training on this
            (on-demand) placement if the spot run ends without finishing it.
        name: Pipeline name; default :func:`pipeline_name`.
        run_timeout: The run's deadline (Argo ``activeDeadlineSeconds``); every retry
            window must cover it.

    Returns:
        The ``@dsl.pipeline`` function.

    Raises:
        PlacementError: a retry window shorter than ``run_timeout``.
    """
    train_placement = train_placement or Placement()
    if copy_placement is None:
        copy_placement = COPY_PLACEMENT
        if train_placement.pool in SPOT_POOLS:
            copy_placement = COPY_PLACEMENT.with_(pool=train_placement.pool)
    places = {"train": train_placement, "copy": copy_placement, "fallback": fallback}
    for what, place in places.items():
        if place is not None:
            check_retry_window(place, run_timeout, what=f"{what} placement")
    name = name or pipeline_name(train_placement.pool, fallback is not None)
    description = DESCRIPTION.format(pool=train_placement.pool)
    if fallback is not None:
        description += FALLBACK_DESCRIPTION
    expect_gpus = train_placement.gpu_count
    on_demand = fallback_component(fallback, copy_placement) if fallback is not None else None

    @as_parameters()
    def preemptible_pipeline(
        data_src: str,
        checkpoint_dir: str,
        data_dst: str = "",
        initial_checkpoint: str = "",
        settings: TrainSettings = DEFAULT_SETTINGS,
        local_workers: int = 1,
    ) -> Outputs:
        """Copies inputs, then trains on preemptible GPUs with checkpointed retries.

        Args:
            data_src: The data to copy, gs:// or local: an image folder
                (<root>/<label>/*.png|jpg), or a tfds data_dir when task_args names
                a dataset (``{"dataset": "cassava"}``).
            checkpoint_dir: Persistent (gs:// or /gcs/) folder every retry resumes from.
            data_dst: Copy the data here (gs://) instead of into a KFP artifact.
            initial_checkpoint: Checkpoint folder to start from; empty starts fresh.
            settings: The training settings, each a parameter (train_settings.HELP).
            local_workers: Worker processes per node (MWMS over localhost).
        """
        handler = contextlib.nullcontext()
        if on_demand is not None:
            # Created first and outside the body, as dsl.ExitHandler requires; it takes
            # nothing from the body's tasks (the SDK refuses that) and nothing takes
            # anything from it (the backend makes it an exit hook, not a DAG task).
            exit_task = on_demand(
                data_src=data_src,
                data_dst=data_dst,
                checkpoint_dir=checkpoint_dir,
                local_workers=local_workers,
                **settings.inputs(),
            )
            exit_task.set_display_name(f"fall back to {fallback.pool}").set_caching_options(False)
            handler = dsl.ExitHandler(exit_task, name=f"train on {train_placement.pool}")
        with handler:
            data, seed = copy_inputs(
                data_src=data_src,
                data_dst=data_dst,
                initial_checkpoint=initial_checkpoint,
                checkpoint_dir=checkpoint_dir,
                apply=functools.partial(apply_placement, copy_placement),
            )
            trained = train(
                data=data.outputs["copied"],
                checkpoint_dir=checkpoint_dir,
                local_workers=local_workers,
                expect_gpus=expect_gpus,
                **settings.inputs(),
            ).after(seed)
            apply_placement(
                train_placement, trained.set_display_name(f"train ({train_placement.pool})")
            )
            trained.set_caching_options(False)
            add_profile(
                trained,
                functools.partial(apply_placement, train_placement),
                data=data.outputs["copied"],
                settings=settings,
                expect_gpus=expect_gpus,
                local_workers=local_workers,
            )
        if on_demand is not None:
            return None
        return Outputs(model=trained.outputs["model"], metrics=trained.outputs["metrics"])

    if fallback is not None:
        # The model comes from the spot task or the fall-back, and an exit task's
        # outputs cannot be pipeline outputs: no pipeline outputs.
        preemptible_pipeline.__signature__ = preemptible_pipeline.__signature__.replace(
            return_annotation=inspect.Signature.empty
        )
    return dsl.pipeline(
        name=name,
        description=description,
        # The run's deadline: Argo's workflow activeDeadlineSeconds, via
        # kubeflow/pipelines backend/src/v2/compiler/argocompiler/argo.go:146 (2.17.0)
        # `activeDeadlineSeconds = buildActiveDeadlineSeconds(kubernetesSpec.GetPipelineConfig())`
        # and :182 `ActiveDeadlineSeconds: activeDeadlineSeconds,`.
        pipeline_config=dsl.PipelineConfig(active_deadline_seconds=seconds(run_timeout)),
    )(preemptible_pipeline)


def add_profile(
    trained: dsl.PipelineTask,
    apply,
    *,
    data,
    settings: TrainSettings,
    expect_gpus: int,
    local_workers=None,
    tensorboard=None,
    tensorboard_experiment=None,
) -> dsl.PipelineTask:
    """Profiles the training setup once ``trained`` is done, placed by ``apply``.

    Same model, data, settings and strategy on the same kind of node as training, so
    the report (KFP Markdown, Metrics, trace) describes the run that just finished.
    The optional inputs, left ``None``, keep the profile component's defaults.
    """
    from spottrain.components.profile.component import profile

    optional = {
        "local_workers": local_workers,
        "tensorboard": tensorboard,
        "tensorboard_experiment": tensorboard_experiment,
    }
    task = profile(
        model=trained.outputs["model"],
        data=data,
        expect_gpus=expect_gpus,
        **settings.profile_inputs(),
        **{name: value for name, value in optional.items() if value is not None},
    )
    apply(task.set_display_name("profile"))
    return task


def _named(component, name: str):
    """``component`` under another name (same inputs, outputs, image and code).

    Works around the KFP SDK (2.17.0) keying kfp-kubernetes settings by executor
    label when it merges a sub-pipeline into its parent: a second ``train`` task
    inside the exit task's graph is compiled as ``exec-train`` there, and the spot
    task's ``exec-train`` lost its pool selector to it (seen in the compiled
    platform spec; tests/unit/pipelines/test_pipelines.py asserts both). A distinct name gives it
    an executor of its own.
    """
    import tempfile

    import yaml
    from kfp import compiler, components

    with tempfile.TemporaryDirectory() as tmp:
        compiler.Compiler().compile(component, f"{tmp}/component.yaml")
        with open(f"{tmp}/component.yaml") as f:
            spec = yaml.safe_load(f)
    old = spec["pipelineInfo"]["name"]
    spec["pipelineInfo"]["name"] = name
    spec["components"] = {
        key.replace(f"comp-{old}", f"comp-{name}"): {
            **value,
            "executorLabel": value["executorLabel"].replace(f"exec-{old}", f"exec-{name}"),
        }
        for key, value in spec["components"].items()
    }
    executors = spec["deploymentSpec"]["executors"]
    spec["deploymentSpec"]["executors"] = {
        key.replace(f"exec-{old}", f"exec-{name}"): value for key, value in executors.items()
    }
    return described(
        components.load_component_from_text(yaml.safe_dump(spec, sort_keys=False)), component
    )


def described(component, *sources):
    """``component`` with each input's description taken from ``sources`` by its name.

    KFP 2.17.0's ``load_component_from_text`` and GCPC's
    ``create_custom_training_job_from_component`` rebuild a component's inputs without
    their descriptions: the KFP and Vertex consoles then show the inputs bare.
    """
    for name, spec in component.component_spec.inputs.items():
        if spec.description:
            continue
        for source in sources:
            given = source.component_spec.inputs or {}
            if name in given and given[name].description:
                spec.description = given[name].description
                break
    return component


def fallback_component(placement: Placement, decide_placement: Placement = COPY_PLACEMENT):
    """The on-demand fall-back: a graph component for ``dsl.ExitHandler(exit_task=...)``.

    Why an exit handler: KFP OSS compiles any task whose trigger strategy is
    ALL_UPSTREAM_TASKS_COMPLETED (``ignore_upstream_failure()`` or an exit task) into
    an Argo exit lifecycle hook of its upstream task, not into a DAG task:
      kubeflow/pipelines backend/src/v2/compiler/argocompiler/dag.go:72 (2.17.0)
      `if kfpTask.GetTriggerPolicy().GetStrategy().String() != "ALL_UPSTREAM_TASKS_COMPLETED" {`
      :86 `name := fmt.Sprintf("exit-hook-%s-%s", name, taskName)`, :124-126 skips it
      in the DAG, and common.go:131-132 hangs it on the upstream task as
      `task.Hooks = wfapi.LifecycleHooks{ wfapi.ExitLifecycleEvent: ...`.
    So a ``dsl.If`` on such a task's output depends on a task Argo never sees
    ("sorting failed: invalid dependency ...", argoproj/argo-workflows
    workflow/validate/validate.go:1366-1368 and util/sorting/topological_sorting.go:26,
    v4.0.5; seen with KFP's own compiler and Argo's validation), which is what the old
    ``ignore_upstream_failure()`` shape did. Here nothing depends on the exit task.

    Why a graph (a CPU decision, then a GPU task only on "resume"): an exit task is
    always scheduled, so a single GPU exit task would ask the on-demand pool for a
    GPU node after every run, even one that finished on spot. KFP OSS compiles a
    graph exit task like a container one (dag.go:77 `tasks, err := c.task(taskName,
    kfpTask, ...)` handles both; upstream's own golden test is
    test_data/compiled-workflows/pipeline_as_exit_task.yaml:566
    `name: exit-hook-root-conditional-notification`). The price is one small CPU pod
    per run.

    Stopping: the KFP UI's Terminate sets the workflow's deadline to 0
    (kubeflow/pipelines backend/src/common/util/execution_spec.go:299, 2.17.0,
    `"activeDeadlineSeconds": 0,`), which fails the body but not exit hooks: Argo
    runs them unless the workflow's shutdown strategy is Terminate
    (argoproj/argo-workflows workflow/controller/exit_handler.go:22, v4.0.5,
    `if exitHook != nil && woc.GetShutdownStrategy().ShouldExecute(true) {`;
    pkg/apis/workflow/v1alpha1/workflow_types.go:577-585) and gives exit pods no
    workflow deadline (workflow/controller/workflowpod.go:668
    `if woc.workflowDeadline != nil && !opts.onExitPod {`). So a terminated or
    timed-out spot run falls back too; docs/gke.md says how to stop both.

    Args:
        placement: Where the resumed training runs (the on-demand GPU pool).
        decide_placement: Where the CPU decision runs.
    """
    from spottrain.components.fallback_decision.component import fallback_decision
    from spottrain.runtime.fallback_words import RESUME

    @dsl.pipeline(name="on-demand-fallback")
    @as_parameters()
    def on_demand_fallback(
        status: dsl.PipelineTaskFinalStatus,
        data_src: str,
        checkpoint_dir: str,
        data_dst: str = "",
        settings: TrainSettings = DEFAULT_SETTINGS,
        local_workers: int = 1,
    ):
        """Resumes the spot run on the on-demand pool if it did not finish."""
        decision = fallback_decision(
            status=status, checkpoint_dir=checkpoint_dir, train_steps=settings.train_steps
        )
        apply_placement(decide_placement, decision.set_display_name("resume on demand?"))
        decision.set_caching_options(False)
        with dsl.If(decision.output == RESUME, name="resume on demand"):
            # The exit task may not take the spot run's copy (kfp/dsl/tasks_group.py:137
            # in 2.17.0, `exit_task cannot depend on any other tasks.`), so it copies
            # again inside this sub-pipeline: idempotent, a no-op into a filled data_dst.
            data = _named(gcs_copy, "gcs-copy-on-demand")(src=data_src, dst=data_dst)
            data.set_display_name("copy data")
            apply_placement(decide_placement, data).set_caching_options(False)
            resumed = _named(train, "train-on-demand")(
                data=data.outputs["copied"],
                checkpoint_dir=checkpoint_dir,
                local_workers=local_workers,
                expect_gpus=placement.gpu_count,
                **settings.inputs(),
            )
            apply_placement(placement, resumed.set_display_name(f"train ({placement.pool})"))
            resumed.set_caching_options(False)

    return on_demand_fallback


__all__ = [
    "NAME",
    "ON_DEMAND_PLACEMENT",
    "Outputs",
    "add_profile",
    "build",
    "copy_inputs",
    "fallback_component",
    "pipeline_name",
]
