"""The ``profile`` component: what limits the training's speed, with advice."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Markdown, Metrics, Model, Output

from spottrain.version import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def profile(
    data: Input[Dataset],
    report: Output[Markdown],
    report_html: Output[HTML],
    metrics: Output[Metrics],
    trace: Output[Artifact],
    model: Input[Model] = None,
    backbone: str = "resnet50",
    weights: str = "imagenet",
    image_size: int = 224,
    batch_size_per_replica: int = 32,
    learning_rate: float = 0.001,
    mixed_precision: bool = False,
    jit_compile: str = "auto",
    task: str = "",
    task_args: str = "{}",
    tensorboard_dir: str = "",
    extra_args: list = [],  # noqa: B006 - KFP needs a literal default, never mutated
    local_workers: int = 1,
    expect_gpus: int = 0,
    skip_steps: int = 5,
    profile_steps: int = 20,
    bandwidth_gbps: float = 10.0,
    cloud_profiler: bool = False,
    tensorboard: str = "",
    tensorboard_experiment: str = "",
):
    """Profiles a short window of the training setup and reports what limits it.

    Builds the same model, input pipeline and strategy as the train component,
    records skip_steps + profile_steps steps (the latter with the TensorFlow
    Profiler) without touching the training's checkpoints, and analyses the trace:
    step time, input-bound share, device compute share, host vs device op placement,
    16/32-bit precision, top ops, AllReduce time vs its estimate, each with advice.

    Args:
        data: The run's data folder (the trainer's --data), or a gcs_copy pointer to one.
        report: The findings and tables (Markdown, shown in the KFP UI).
        report_html: The same report as an HTML page.
        metrics: The report's numbers (step times, input share, AllReduce, ...).
        trace: TensorBoard log dir with the trace: tensorboard --logdir <it>, Profile tab.
        model: The trained model; its training_summary.json is compared with the profile.
        backbone: resnet50, mobilenet_v2 or small_cnn.
        weights: imagenet or none.
        image_size: Square input size in pixels.
        batch_size_per_replica: Batch size per GPU (global = this x replicas).
        learning_rate: Peak learning rate.
        mixed_precision: Use mixed float16 (GPUs with tensor cores).
        jit_compile: XLA for the training step: auto (on for one GPU, as
            Keras fit), on or off.
        task: What to train: <module>:<Class> of a spottrain.trainer.task_api.Task in
            the image; empty = the built-in image classifier.
        task_args: The task's own settings, a JSON object.
        tensorboard_dir: Also copy the trace under this TensorBoard log folder; empty = no.
        extra_args: More spottrain.trainer.task flags, e.g. ["--cache-max-mb", "4096"].
        local_workers: Worker processes on this node (MWMS over 127.0.0.1), as in train.
        expect_gpus: GPUs this task was placed with; fails fast when TensorFlow sees fewer.
        skip_steps: Steps run before the profiled window (tracing, autotuning); not
            the learning-rate warm-up.
        profile_steps: Steps recorded by the profiler.
        bandwidth_gbps: Bandwidth between replicas for the AllReduce estimate, Gbit/s.
        cloud_profiler: Also start Vertex AI's cloud_profiler plugin (Vertex TensorBoard).
        tensorboard: Vertex TensorBoard resource name
            (projects/P/locations/L/tensorboards/ID) to upload the trace to; empty = none.
        tensorboard_experiment: Experiment to upload it under (default spottrain-profile).
    """
    from spottrain.runtime.profile import run_component
    from spottrain.runtime.train_settings import TrainSettings

    # The training's steps and checkpoints are not the profile's (TrainSettings.for_profile).
    settings = TrainSettings(
        backbone=backbone,
        weights=weights,
        image_size=image_size,
        batch_size_per_replica=batch_size_per_replica,
        learning_rate=learning_rate,
        mixed_precision=mixed_precision,
        jit_compile=jit_compile,
        task=task,
        task_args=task_args,
        tensorboard_dir=tensorboard_dir,
    )
    run_component(
        data=data,
        model=model,
        report=report,
        report_html=report_html,
        metrics=metrics,
        trace=trace,
        settings=settings,
        extra_args=extra_args,
        local_workers=local_workers,
        expect_gpus=expect_gpus,
        skip_steps=skip_steps,
        profile_steps=profile_steps,
        bandwidth_gbps=bandwidth_gbps,
        cloud_profiler=cloud_profiler,
        tensorboard=tensorboard,
        tensorboard_experiment=tensorboard_experiment,
    )
