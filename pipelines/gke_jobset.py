"""The GKE pipeline whose training runs as a JobSet (the GPU default).

Same copies, outputs and profile as ``gke.build``; the train step is ``train_job``: a
small launcher pod on the on-demand pool that runs the training as a JobSet of
``workers`` pods on the spot/preemptible pool (or a ComputeClass), each with the trainer
as its main process; JobSet's controller restarts the gang, and the launcher moves it to
the on-demand pool when spot capacity does not come (so no exit-hook fall-back, and the
run ends Succeeded).
"""

import functools

from kfp import dsl

from spottrain.components.train_job.component import train_job
from spottrain.pipelines.gke import Outputs, add_profile, copy_inputs
from spottrain.pipelines.placement import apply_placement
from spottrain.placement import (
    COPY_PLACEMENT,
    LAUNCHER_PLACEMENT,
    RUN_TIMEOUT,
    SPOT_POOLS,
    Placement,
    check_retry_window,
    seconds,
)
from spottrain.runtime.train_settings import DEFAULT_SETTINGS, TrainSettings, as_parameters

DESCRIPTION = (
    "Copy data and an initial checkpoint, then train as a JobSet (jobset.x-k8s.io) of "
    "`workers` pods on a {pool} GPU node pool (the trainer is each pod's main process); "
    "pod disruptions never use up retries, and the training moves to the on-demand "
    "pool when its capacity does not come."
)


def pipeline_name(pool: str = "preemptible") -> str:
    """``spottrain-gke-<pool>-job``."""
    return f"spottrain-gke-{pool}-job"


def build(
    train_placement: Placement | None = None,
    copy_placement: Placement | None = None,
    name: str = "",
    run_timeout: str = RUN_TIMEOUT,
    launcher_placement: Placement = LAUNCHER_PLACEMENT,
):
    """Builds the JobSet-engine pipeline for a compile-time placement.

    Args:
        train_placement: Where the training pods run first (GPUs, pool, memory,
            retries: the JobSet's counted gang restarts); default ``Placement()``.
        copy_placement: Where the copies run; default tolerating the training's pool.
        name: Pipeline name; default :func:`pipeline_name`.
        run_timeout: The run's deadline, counted by the launcher from its first JobSet.
        launcher_placement: Where the launcher pod runs (on-demand CPU).

    Returns:
        The ``@dsl.pipeline`` function.
    """
    train_placement = train_placement or Placement()
    if copy_placement is None:
        copy_placement = COPY_PLACEMENT
        if train_placement.pool in SPOT_POOLS:
            copy_placement = COPY_PLACEMENT.with_(pool=train_placement.pool)
    for what, place in (("copy", copy_placement), ("launcher", launcher_placement)):
        check_retry_window(place, run_timeout, what=f"{what} placement")
    name = name or pipeline_name(train_placement.pool)
    expect_gpus = train_placement.gpu_count

    @as_parameters()
    def job_pipeline(
        data_src: str,
        checkpoint_dir: str,
        data_dst: str = "",
        initial_checkpoint: str = "",
        settings: TrainSettings = DEFAULT_SETTINGS,
        workers: int = 1,
        unschedulable_timeout: int = 1800,
        finish_by: str = "",
        prior_step_seconds: float = 0.0,
        queue: str = "",
        priority_class: str = "",
    ) -> Outputs:
        """Copies inputs, then trains as a JobSet of spot GPU pods.

        Args:
            data_src: The data to copy, gs:// or local: an image folder
                (<root>/<label>/*.png|jpg), or a tfds data_dir when task_args names
                a dataset (``{"dataset": "cassava"}``).
            checkpoint_dir: gs:// folder every pod and retry resumes from.
            data_dst: Copy the data here (gs://): the JobSet's pods read it from there.
            initial_checkpoint: Checkpoint folder to start from; empty starts fresh.
            settings: The training settings, each a parameter (train_settings.HELP).
            workers: Pods (nodes) training together; 1 = one node.
            unschedulable_timeout: Seconds to wait for spot capacity before moving
                to the on-demand pool.
            finish_by: A deadline ('6h' or a time with its zone): moves to on-demand
                when spot would no longer finish by it (docs/deadline.md). Empty: none.
            prior_step_seconds: Seconds per step an earlier run measured; 0: unknown.
            queue: A Kueue LocalQueue to submit the gang to; its ResourceFlavors then
                choose spot or on-demand (docs/gke.md). Empty: not queued. A queued
                run skips the profile step (its GPU pod would bypass the queue).
            priority_class: A Kueue WorkloadPriorityClass for the queued gang.
        """
        data, seed = copy_inputs(
            data_src=data_src,
            data_dst=data_dst,
            initial_checkpoint=initial_checkpoint,
            checkpoint_dir=checkpoint_dir,
            apply=functools.partial(apply_placement, copy_placement),
        )
        trained = train_job(
            data=data.outputs["copied"],
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
            pool=train_placement.pool,
            gpu_type=train_placement.gpu_type,
            gpus=train_placement.gpu_count,
            memory_limit=train_placement.memory_limit,
            retries=train_placement.retries,
            on_demand=True,
            deadline=run_timeout,
            compute_class=train_placement.compute_class,
            grace_seconds=train_placement.grace_seconds,
            checkpoint_dir=checkpoint_dir,
            workers=workers,
            unschedulable_timeout=unschedulable_timeout,
            finish_by=finish_by,
            prior_step_seconds=prior_step_seconds,
            queue=queue,
            priority_class=priority_class,
            **settings.inputs(),
        ).after(seed)
        apply_placement(
            launcher_placement,
            trained.set_display_name(f"train ({train_placement.pool}, JobSet)"),
        )
        trained.set_caching_options(False)
        # A queued run has no profile step: its KFP pod cannot carry a queue name given
        # at run time (kfp-kubernetes 2.17.3 add_pod_label takes a compile-time constant,
        # kfp/kubernetes/pod_metadata.py:39-41), and a GPU pod outside the queue takes
        # GPUs Kueue counts as free for the queue's admitted workloads.
        with dsl.If(queue == "", name="profile unless queued"):
            add_profile(
                trained,
                functools.partial(apply_placement, train_placement),
                data=data.outputs["copied"],
                settings=settings,
                expect_gpus=expect_gpus,
            )
        return Outputs(model=trained.outputs["model"], metrics=trained.outputs["metrics"])

    return dsl.pipeline(
        name=name,
        description=DESCRIPTION.format(pool=train_placement.pool),
        pipeline_config=dsl.PipelineConfig(active_deadline_seconds=seconds(run_timeout)),
    )(job_pipeline)
