"""The ``train_job`` component: training as a JobSet (a gang of pods), followed by a launcher."""

from kfp import dsl
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from spottrain.version import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def train_job(
    data: Input[Dataset],
    checkpoint_dir: str,
    run_id: str,
    task_name: str,
    model: Output[Model],
    metrics: Output[Metrics],
    attempts: Output[Markdown],
    report: Output[HTML],
    classification: Output[ClassificationMetrics],
    backbone: str = "resnet50",
    weights: str = "imagenet",
    image_size: int = 224,
    batch_size_per_replica: int = 32,
    train_steps: int = 1000,
    learning_rate: float = 0.001,
    save_every_steps: int = 100,
    mixed_precision: bool = False,
    steps_per_loop: str = "1",
    jit_compile: str = "auto",
    task: str = "",
    task_args: str = "{}",
    tensorboard_dir: str = "",
    extra_args: list = [],  # noqa: B006 - KFP needs a literal default, never mutated
    workers: int = 1,
    pool: str = "preemptible",
    gpu_type: str = "nvidia-tesla-t4",
    gpus: int = 1,
    memory_limit: str = "48G",
    retries: int = 5,
    unschedulable_timeout: int = 1800,
    on_demand: bool = True,
    deadline: str = "604800s",
    compute_class: str = "",
    grace_seconds: int = 30,
    finish_by: str = "",
    prior_step_seconds: float = 0.0,
    queue: str = "",
    priority_class: str = "",
    admission_timeout: int = 21600,
):
    """Trains on a gang of pods (a JobSet, jobset.x-k8s.io) and follows it to the end.

    The trainer is each pod's main process, so it gets the whole spot notice to save.
    The JobSet restarts the whole gang; disruptions and the notice never use up
    retries; exit 64/65 ends the run at once. Needs JobSet (``make gke-jobset``).

    Args:
        data: The run's data folder in gs:// (the trainer's --data; a gcs_copy output
            with dst=gs://..., or a gs:// root).
        checkpoint_dir: gs:// folder every pod and retry resumes from.
        run_id: dsl.PIPELINE_JOB_ID_PLACEHOLDER: names the JobSet, so a retry re-attaches.
        task_name: dsl.PIPELINE_TASK_NAME_PLACEHOLDER: names the JobSet with run_id.
        model: The trained model: model.keras (else its weights), a SavedModel, and
            training_summary.json (what was exported, and why not the rest).
        metrics: Final step, validation accuracy and loss, and the attempt ledger's totals.
        attempts: The attempt ledger as a Markdown table, with each attempt's node,
            node kind, disruption reason and pod exit codes.
        report: The attempts on a time axis (capacity, notice, steps saved and lost,
            cost) and the loss curve, as an HTML page the KFP UI shows.
        classification: The task's confusion matrix on the validation split, which the
            KFP UI draws (the image classifier gives one).
        backbone: resnet50, mobilenet_v2 or small_cnn.
        weights: imagenet or none.
        image_size: Square input size in pixels.
        batch_size_per_replica: Batch size per GPU (global = this x replicas).
        train_steps: Total optimizer steps across all attempts.
        learning_rate: Peak learning rate.
        save_every_steps: Checkpoint interval: at most this many steps are lost per preemption.
        mixed_precision: Use mixed float16 (GPUs with tensor cores).
        steps_per_loop: Training steps per compiled call, or "auto" (calls of
            about 0.5 s); a notice is heard when the running call ends.
        jit_compile: XLA for the training step: auto (on for one GPU, as
            Keras fit), on or off.
        task: What to train: <module>:<Class> of a spottrain.trainer.task_api.Task in
            the image; empty = the built-in image classifier.
        task_args: The task's own settings, a JSON object.
        tensorboard_dir: TensorBoard log folder; empty uses <checkpoint_dir>/tensorboard.
        extra_args: More spottrain.trainer.task flags, e.g. ["--warmup-steps", "100"].
        workers: Pods (nodes), one MultiWorkerMirroredStrategy worker each; 1 = one node.
        pool: preemptible, spot or on-demand: the node pool the pods run on first.
        gpu_type: GKE accelerator of every pod's node.
        gpus: GPUs per pod.
        memory_limit: Memory per pod (Kubernetes quantity).
        retries: Gang restarts after real failures (disruptions are free).
        unschedulable_timeout: Seconds the pods may wait for capacity: on a plain
            spot pool the training then moves to the on-demand pool; otherwise (an
            on-demand pool, a ComputeClass) the run ends with 172 (retryable).
        on_demand: Move to the on-demand pool when spot capacity does not come or
            the retries are used up (resumes from the checkpoint).
        deadline: The whole run's deadline from its first JobSet, e.g. "604800s"
            (moves and restarts included; past it: exit 64).
        compute_class: A GKE custom ComputeClass the pods select instead of a pool
            (``make gke-computeclass``): the class moves them from spot to on-demand,
            so ``on_demand`` is unused; ``pool`` must be spot. Empty: the pool and
            the launcher's own fall-back.
        grace_seconds: The pods' terminationGracePeriodSeconds: 30 (a spot node's
            notice), up to 105 on spot nodes whose shutdown grace is 120 s.
        finish_by: A deadline ("6h" from the first launcher, or a time with its zone):
            the move to on-demand is made when spot would no longer finish by it, from
            what the run measured (docs/deadline.md). Empty: none.
        prior_step_seconds: Seconds per training step, as an earlier run measured them:
            with finish_by, the deadline binds before a step is measured. 0: unknown.
        queue: A Kueue LocalQueue in the run's namespace to submit the gang to: it
            starts when Kueue admits all of it, the queue's ResourceFlavors choose
            spot or on-demand, and Kueue's preemptions are free restarts (docs/gke.md,
            "On a cluster with Kueue"). Empty: not queued.
        priority_class: A Kueue WorkloadPriorityClass for the queued gang.
        admission_timeout: Seconds the queued gang may wait for admission before the
            run ends with 172 (retryable).
    """
    from spottrain.runtime.train_job.component import run_component
    from spottrain.runtime.train_settings import TrainSettings

    settings = TrainSettings(
        backbone=backbone,
        weights=weights,
        image_size=image_size,
        batch_size_per_replica=batch_size_per_replica,
        train_steps=train_steps,
        learning_rate=learning_rate,
        save_every_steps=save_every_steps,
        mixed_precision=mixed_precision,
        steps_per_loop=steps_per_loop,
        jit_compile=jit_compile,
        task=task,
        task_args=task_args,
        tensorboard_dir=tensorboard_dir,
    )
    run_component(
        data=data,
        model=model,
        metrics=metrics,
        attempts=attempts,
        report=report,
        classification=classification,
        checkpoint_dir=checkpoint_dir,
        settings=settings,
        run_id=run_id,
        task_name=task_name,
        workers=workers,
        pool=pool,
        gpu_type=gpu_type,
        gpus=gpus,
        memory_limit=memory_limit,
        retries=retries,
        unschedulable_timeout=unschedulable_timeout,
        on_demand=on_demand,
        deadline=deadline,
        compute_class=compute_class,
        grace_seconds=grace_seconds,
        extra_args=extra_args,
        finish_by=finish_by,
        prior_step_seconds=prior_step_seconds,
        queue=queue,
        priority_class=priority_class,
        admission_timeout=admission_timeout,
    )
