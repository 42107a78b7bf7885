"""What the gang's pods would refuse, refused by the launcher before it creates anything.

``make run-gke`` checks a run's parameters before submitting it (``pipelines/guards.py``
``check_values``), but a run started from the KFP UI, or by a retry of an older run,
skips that: the launcher then created a JobSet whose every pod exited 64 on its flags
(``steps_per_loop 0``, ``jit_compile maybe``, ``task_args`` that are not a JSON
object), or died on a worker count no Indexed Job takes (a ValueError, exit 1, which
KFP retries). :func:`check` runs the trainer's own parser and checks
(``spottrain.trainer.config``: no data, no TensorFlow, the task's module not
imported) on the exact flags the pods get, and builds the gang's JobSets' shape; it
returns those flags and ``launch`` gives the pods these, so the launcher and its pods
cannot disagree.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from spottrain import exits
from spottrain.exits import ConfigError
from spottrain.placement import Placement
from spottrain.runtime import train as in_pod
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import names
from spottrain.runtime.train_settings import TrainSettings
from spottrain.trainer import checkpointing, config

if TYPE_CHECKING:
    from spottrain.runtime.train_job.inputs import RunInputs

_FLAG = re.compile(r"--([a-z][a-z0-9-]*)")


def check(run: RunInputs) -> list[str]:
    """The gang's pods' ``spottrain.trainer.task`` flags, checked as the pods will check them.

    Raises ``TrainFailed`` (exit 64, one line) for what the pods or JobSets would refuse.

    The trainer's line names its flags; the component's parameters of the same name
    are named instead (``steps_per_loop``), flags from ``extra_args`` stay flags.
    """
    try:
        for on_demand in (False, True):  # the longer name, the on-demand gang's, too
            name = names.jobset_name(run.run_id, run.task_name, on_demand=on_demand)
            js.WorkerSet(name=name, namespace="", image="", args=(), workers=run.workers,
                         placement=Placement())  # fmt: skip
    except ValueError as err:
        raise _fatal(str(err)) from None
    flags = in_pod.trainer_flags(
        data_dir=run.data_dir,
        checkpoint_dir=run.checkpoint_dir,
        model_dir=checkpointing.job_model_dir(run.checkpoint_dir),
        settings=run.settings,
        extra_args=run.extra_args,
    )
    try:
        # As the pods' trainer reads them: no Vertex AIP_* dirs on GKE.
        config.validate(config.parse_args(flags, {}))
    except ConfigError as err:
        raise _fatal(f"the gang's pods would refuse their settings: {_params(str(err))}") from None
    return flags


def _params(line: str) -> str:
    """``--steps-per-loop`` → ``steps_per_loop`` where a component parameter sets it."""
    settings = set(TrainSettings.names())

    def named(m: re.Match) -> str:
        name = m.group(1).replace("-", "_")
        return name if name in settings else m.group(0)

    return _FLAG.sub(named, line)


def _fatal(message: str) -> in_pod.TrainFailed:
    return in_pod.TrainFailed(exits.FATAL_CONFIG, message)
