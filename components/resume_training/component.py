"""The ``resume_training`` component: the on-demand fall-back's training attempt."""

from kfp import dsl
from kfp.dsl import Markdown, Metrics, Model, Output

from spottrain.version import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def resume_training(
    data_src: str,
    checkpoint_dir: str,
    model: Output[Model],
    metrics: Output[Metrics],
    attempts: Output[Markdown],
    data_dst: str = "",
    backbone: str = "resnet50",
    weights: str = "imagenet",
    image_size: int = 224,
    batch_size_per_replica: int = 32,
    train_steps: int = 1000,
    learning_rate: float = 0.001,
    save_every_steps: int = 100,
    mixed_precision: bool = False,
    tensorboard_dir: str = "",
    extra_args: list = [],  # noqa: B006 - KFP needs a literal default, never mutated
    local_workers: int = 1,
    expect_gpus: int = 0,
):
    """Resumes a spot run's training from checkpoint_dir, reading the data from its source.

    The train component, for an exit task that may not take another task's outputs:
    copies data_src to data_dst (a no-op if the spot run's copy finished) or to a
    local folder, then trains exactly as train does (same outputs).

    Args:
        data_src: Image folder (<root>/<label>/*.png|jpg), gs:// or local.
        checkpoint_dir: The spot run's persistent checkpoint folder to resume from.
        model: The trained model (model.keras, a SavedModel, training_summary.json).
        metrics: Final step, validation accuracy and loss, and the attempt ledger's totals.
        attempts: The attempt ledger (checkpoint_dir/attempts.json) as a Markdown table.
        data_dst: Where the spot run copied the data (gs://); empty copies it locally.
        backbone: resnet50, mobilenet_v2 or small_cnn.
        weights: imagenet or none.
        image_size: Square input size in pixels.
        batch_size_per_replica: Batch size per GPU (global = this x replicas).
        train_steps: Total optimizer steps across all attempts.
        learning_rate: Peak learning rate.
        save_every_steps: Checkpoint interval in steps.
        mixed_precision: Use mixed float16 (GPUs with tensor cores).
        tensorboard_dir: TensorBoard log folder; empty uses $AIP_TENSORBOARD_LOG_DIR.
        extra_args: More trainer.task flags, e.g. ["--warmup-steps", "100"].
        local_workers: Worker processes on this node (MWMS over 127.0.0.1); 1 runs in-process.
        expect_gpus: GPUs this task was placed with; fails fast when TensorFlow sees fewer.
    """
    from spottrain.runtime.fallback import resume_component

    resume_component(
        data_src=data_src,
        data_dst=data_dst,
        model=model,
        metrics=metrics,
        attempts=attempts,
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
        extra_args=extra_args,
        local_workers=local_workers,
        expect_gpus=expect_gpus,
    )
