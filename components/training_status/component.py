"""The ``training_status`` component: did an upstream train task finish?"""

from typing import Optional

from kfp import dsl
from kfp.dsl import Input, Model

from spottrain.version import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def training_status(model: Optional[Input[Model]] = None) -> str:  # noqa: UP045 - KFP reads Optional
    """Returns "completed" when the model holds a training summary, else "incomplete".

    Runs after a train task even when it failed (ignore_upstream_failure), to decide
    whether an on-demand fall-back has to resume the training.

    Args:
        model: The train task's model; absent when that task failed.
    """
    from spottrain.runtime.train import completion_status

    return completion_status(model.path if model is not None else None)
