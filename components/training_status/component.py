"""The ``training_status`` component: how far did the training in a checkpoint dir get?"""

from kfp import dsl

from spottrain.version import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def training_status(checkpoint_dir: str, train_steps: int) -> str:
    """Returns "completed", "incomplete" or "fatal" for the run in checkpoint_dir.

    The words of spottrain.runtime.fallback_words.

    Reads only the checkpoint dir, so it works when the train task produced no
    outputs ("fatal": the trainer recorded a non-retryable error, which a retry
    would repeat). The on-demand fall-back decides with the same check
    (fallback_decision).

    Args:
        checkpoint_dir: The train task's checkpoint folder (gs://, /gcs/ or local).
        train_steps: The step count that means done.
    """
    from spottrain.runtime.training_status import training_status as status

    return status(checkpoint_dir, train_steps)
