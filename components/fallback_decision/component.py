"""The ``fallback_decision`` component: should the on-demand fall-back resume training?"""

from kfp import dsl

from spottrain.version import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def fallback_decision(status: dict, checkpoint_dir: str, train_steps: int) -> str:
    """Returns "resume", "completed", "fatal" or "cancelled" after a spot training run.

    The words of spottrain.runtime.fallback_words, as training_status and the Vertex
    fall-back speak them.

    The first step of the on-demand fall-back (a dsl.ExitHandler exit task), on a CPU
    node: only "resume" starts a GPU task on the on-demand pool. The checkpoint dir
    decides; the run's final status only stops a cancelled run from resuming.

    Args:
        status: The spot run's dsl.PipelineTaskFinalStatus, as a dict.
        checkpoint_dir: The spot run's checkpoint folder (gs://, /gcs/ or local).
        train_steps: The step count that means done.
    """
    from spottrain.runtime.fallback_decision import decide_component

    return decide_component(status, checkpoint_dir, train_steps)
