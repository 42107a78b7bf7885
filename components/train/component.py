"""The ``train`` component: one checkpointed, resumable training attempt."""

from kfp import dsl
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from spottrain.version import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def train(
    data: Input[Dataset],
    checkpoint_dir: str,
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
    local_workers: int = 1,
    expect_gpus: int = 0,
):
    """Trains the task (default: the image classifier), resuming; exits 143 when preempted.

    Args:
        data: The run's data folder (the trainer's --data: the image task's image
            folder, or its tfds data_dir when task_args names a dataset), or a
            gcs_copy pointer to one.
        checkpoint_dir: Persistent checkpoint folder (gs:// or /gcs/) every retry resumes from.
        model: The trained model: model.keras (else its weights), a SavedModel, and
            training_summary.json (what was exported, and why not the rest).
        metrics: Final step, validation accuracy and loss, global batch size, workers, and
            the attempt ledger's totals (ledger_attempts, ledger_preemptions, ledger_interruptions,
            ledger_steps_lost; ledger_spent, ledger_saved, ledger_lost where priced).
        attempts: The attempt ledger (checkpoint_dir/attempts.json) as a Markdown table.
        report: The attempts on a time axis (capacity, notice, steps saved and lost,
            spent) and the loss curve, as an HTML page the KFP UI shows.
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
        tensorboard_dir: TensorBoard log folder; empty uses $AIP_TENSORBOARD_LOG_DIR
            (Vertex), else <checkpoint_dir>/tensorboard.
        extra_args: More spottrain.trainer.task flags, e.g. ["--warmup-steps", "100"].
        local_workers: Worker processes on this node (MWMS over 127.0.0.1); 1 runs in-process.
        expect_gpus: GPUs this task was placed with; fails fast when TensorFlow sees fewer.
    """
    from spottrain.runtime.train import run_component
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
        extra_args=extra_args,
        local_workers=local_workers,
        expect_gpus=expect_gpus,
    )
