"""The ``training_status`` component: how far did the training in a checkpoint dir get?"""

from kfp import dsl

from spottrain.version import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def training_status(checkpoint_dir: str, train_steps: int) -> str:
    """Returns "completed", "incomplete" or "fatal" for the run in checkpoint_dir.

    Runs after a spot train task whatever its fate (ignore_upstream_failure), reading
    only the checkpoint dir, so it works when that task produced no outputs; an
    on-demand fall-back resumes the training only on "incomplete" ("fatal": the
    trainer recorded a non-retryable error, which would fail on-demand too).

    Args:
        checkpoint_dir: The train task's checkpoint folder (gs://, /gcs/ or local).
        train_steps: The step count that means done.
    """
    from spottrain.runtime.train import training_status as status

    return status(checkpoint_dir, train_steps)
