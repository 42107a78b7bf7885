"""The preemptible GKE pipeline: copy data, seed the checkpoint, train on spot GPUs.

Preemption is a task failure to KFP: the train task's retry policy starts a new
pod, and the trainer resumes from the last checkpoint in ``checkpoint_dir``. The
copies are separate idempotent steps (the seed's refactoring), so a retried
train step never re-copies an initial checkpoint over newer ones.

It is compiled once per pool kind (``preemptible`` and ``spot``: GKE labels and
our node-pool command taint them differently), with or without the on-demand
fall-back.
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Metrics, Model

from spottrain.components.gcs_copy.component import gcs_copy
from spottrain.components.train.component import train
from spottrain.pipelines.placement import (
    COPY_PLACEMENT,
    ON_DEMAND_PLACEMENT,
    RUN_TIMEOUT,
    SPOT_POOLS,
    Placement,
    check_retry_window,
    seconds,
)

NAME = "spottrain-preemptible"
DESCRIPTION = (
    "Copy data and an initial checkpoint, then train with checkpoints on a {pool} "
    "GPU node pool; KFP retries resume a preempted run from its last checkpoint."
)


def pipeline_name(pool: str = "preemptible", fallback: bool = False) -> str:
    """The KFP pipeline name of a variant, e.g. ``spottrain-spot-fallback``."""
    return f"spottrain-{pool}" + ("-fallback" if fallback else "")


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
        train_placement: Where training runs; default ``Placement()`` (the seed's
            preemptible pool, 1 T4, 48G, 5 retries with exponential backoff).
        copy_placement: Where the copies run; default ``COPY_PLACEMENT`` tolerating
            the training's pool.
        fallback: When set, a second train task on this (on-demand) placement
            resumes from the same checkpoint if the spot task exhausts its retries.
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
    expect_gpus = train_placement.gpu_count

    def preemptible_pipeline(
        data_src: str,
        checkpoint_dir: str,
        data_dst: str = "",
        initial_checkpoint: str = "",
        backbone: str = "resnet50",
        weights: str = "imagenet",
        image_size: int = 224,
        batch_size_per_replica: int = 32,
        train_steps: int = 1000,
        learning_rate: float = 0.001,
        save_every_steps: int = 100,
        mixed_precision: bool = False,
        tensorboard_dir: str = "",
        local_workers: int = 1,
        preempt_at_step: int = 0,
    ) -> Outputs:
        """Copies inputs, then trains on preemptible GPUs with checkpointed retries.

        Args:
            data_src: Image folder (<root>/<label>/*.png|jpg), gs:// or local.
            checkpoint_dir: Persistent (gs:// or /gcs/) folder every retry resumes from.
            data_dst: Copy the data here (gs://) instead of into a KFP artifact.
            initial_checkpoint: Checkpoint folder to start from; empty starts fresh.
            backbone: resnet50, mobilenet_v2 or small_cnn.
            weights: imagenet or none.
            image_size: Square input size in pixels.
            batch_size_per_replica: Batch size per GPU.
            train_steps: Total optimizer steps across all attempts.
            learning_rate: Peak learning rate.
            save_every_steps: Checkpoint interval in steps.
            mixed_precision: Use mixed float16.
            tensorboard_dir: TensorBoard log folder; empty for none.
            local_workers: Worker processes per node (MWMS over localhost).
            preempt_at_step: Chaos test: preempt once when passing this step; 0 = off.
        """
        data, seed = copy_inputs(
            data_src=data_src,
            data_dst=data_dst,
            initial_checkpoint=initial_checkpoint,
            checkpoint_dir=checkpoint_dir,
            apply=copy_placement.apply,
        )
        hyper = dict(
            checkpoint_dir=checkpoint_dir,
            backbone=backbone,
            weights=weights,
            image_size=image_size,
            batch_size_per_replica=batch_size_per_replica,
            train_steps=train_steps,
            learning_rate=learning_rate,
            save_every_steps=save_every_steps,
            mixed_precision=mixed_precision,
            tensorboard_dir=tensorboard_dir,
            local_workers=local_workers,
        )
        trained = train(
            data=data.outputs["copied"],
            preempt_at_step=preempt_at_step,
            expect_gpus=expect_gpus,
            **hyper,
        ).after(seed)
        train_placement.apply(trained.set_display_name(f"train ({train_placement.pool})"))
        trained.set_caching_options(False)
        if fallback is not None:
            add_fallback(trained, fallback, data=data.outputs["copied"], **hyper)
            return None
        add_profile(
            trained,
            train_placement.apply,
            data=data.outputs["copied"],
            expect_gpus=expect_gpus,
            **{k: v for k, v in hyper.items() if k in PROFILE_INPUTS},
        )
        return Outputs(model=trained.outputs["model"], metrics=trained.outputs["metrics"])

    if fallback is not None:
        # The model comes from the spot task or the fall-back, and KFP can only pick
        # one of two outputs across dsl.If/dsl.Else branches: no pipeline outputs.
        del preemptible_pipeline.__annotations__["return"]
    return dsl.pipeline(
        name=name,
        description=DESCRIPTION.format(pool=train_placement.pool),
        # The run's deadline: Argo's workflow activeDeadlineSeconds, via
        # kubeflow/pipelines backend/src/v2/compiler/argocompiler/argo.go:146 (2.17.0)
        # `activeDeadlineSeconds = buildActiveDeadlineSeconds(kubernetesSpec.GetPipelineConfig())`
        # and :182 `ActiveDeadlineSeconds: activeDeadlineSeconds,`.
        pipeline_config=dsl.PipelineConfig(active_deadline_seconds=seconds(run_timeout)),
    )(preemptible_pipeline)


# The train inputs the profile shares (it replaces the checkpoint dir and steps).
PROFILE_INPUTS = (
    "backbone",
    "weights",
    "image_size",
    "batch_size_per_replica",
    "learning_rate",
    "mixed_precision",
    "tensorboard_dir",
    "local_workers",
)


def add_profile(trained: dsl.PipelineTask, apply, **profile_args) -> dsl.PipelineTask:
    """Profiles the training setup once ``trained`` is done, placed by ``apply``.

    Same model, data and strategy on the same kind of node as training, so the
    report (KFP Markdown, Metrics, trace) describes the run that just finished.
    """
    from spottrain.components.profile.component import profile

    task = profile(model=trained.outputs["model"], **profile_args)
    apply(task.set_display_name("profile"))
    return task


def add_fallback(
    spot_task: dsl.PipelineTask, placement: Placement, **train_args
) -> dsl.PipelineTask:
    """Resumes training on ``placement`` if ``spot_task`` failed for good.

    A tiny CPU step that runs whatever the spot task's fate reads the checkpoint
    dir; only when the run is incomplete does a GPU task start on the on-demand
    pool, so a completed spot run costs no on-demand node.

    Returns:
        The fall-back train task (inside its ``dsl.If``).
    """
    from spottrain.components.training_status.component import training_status

    status = training_status(
        checkpoint_dir=train_args["checkpoint_dir"], train_steps=train_args["train_steps"]
    ).set_display_name("spot training finished?")
    status.after(spot_task).ignore_upstream_failure().set_caching_options(False)
    with dsl.If(status.output == "incomplete", name="fall back to on-demand"):
        resumed = train(preempt_at_step=0, expect_gpus=placement.gpu_count, **train_args)
        placement.apply(resumed.set_display_name(f"train ({placement.pool})"))
        resumed.set_caching_options(False)
    return resumed


__all__ = [
    "NAME",
    "ON_DEMAND_PLACEMENT",
    "Outputs",
    "add_profile",
    "build",
    "copy_inputs",
    "pipeline_name",
]
