"""A ``train_job`` run's inputs as one frozen object, checked when it is made.

The component's parameters are spelled out twice only: in its signature
(``components/train_job/component.py``, which KFP compiles) and as the fields here.
:class:`RunInputs` is made once, in the launcher's pod, from the component's
parameters by name (:func:`spottrain.runtime.train_job.component.run_component`), and
handed down whole: the launcher's :class:`decide.Settings` (:meth:`GangInputs.launcher_settings`)
and the gang's :class:`Placement` are read from it. tests/unit/runtime/test_run_inputs.py
ties the fields, and their defaults, to the component's signature.

Submit (``spottrain.pipelines.guards.preflight``, the dry run too) makes a
:class:`GangInputs` of the same values: its checks are the very ones
:class:`RunInputs` runs, so what submit accepts, the launcher accepts. Only what needs
the launcher's pod (the data artifact, the resolved run id and task name, the trainer's
flags) or the cluster (the LocalQueue's existence, the ledger's kept deadline) is left
to it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields

from spottrain import exits
from spottrain.placement import MAX_WORKERS, Placement, PlacementError, seconds
from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_settings import TrainSettings

# A KFP placeholder left unresolved (a run_id KFP did not fill in).
_UNRESOLVED = "{{$."


class InputError(ValueError):
    """A ``train_job`` input the launcher would refuse: one line naming the value.

    ``code``: the launcher's exit code for it (a bad input: no retry fixes it).
    """

    code = exits.FATAL_CONFIG


@dataclass(frozen=True, kw_only=True)
class GangInputs:
    """The gang's and its launcher's settings: what submit knows, checked as the pod does.

    The fields are the ``train_job`` component's parameters of the same names and
    defaults (documented there). Made, it holds what they give: ``placement`` (the
    gang's pods) and ``run_seconds`` (``deadline`` in seconds).

    Raises:
        InputError: the first input refused (one line naming it and its value).
    """

    workers: int = 1
    pool: str = "preemptible"
    gpu_type: str = "nvidia-tesla-t4"
    gpus: int = 1
    memory_limit: str = "48G"
    retries: int = 5
    unschedulable_timeout: int = 1800
    on_demand: bool = True
    deadline: str = "604800s"
    compute_class: str = ""
    grace_seconds: int = 30
    finish_by: str = ""
    prior_step_seconds: float = 0.0
    queue: str = ""
    priority_class: str = ""
    admission_timeout: int = int(d.ADMISSION_DEADLINE)
    placement: Placement = field(init=False)
    run_seconds: int = field(init=False)

    @classmethod
    def names(cls) -> frozenset[str]:
        """The inputs it is made of (not what it derives)."""
        return frozenset(f.name for f in fields(cls) if f.init)

    def __post_init__(self) -> None:
        self._check_gang()

    def _check_gang(self) -> None:
        """Refuses the inputs no gang can be launched with; derives its placement."""
        workers, gpus = self.workers, self.gpus
        if not 1 <= workers <= MAX_WORKERS:
            raise InputError(
                f"workers={workers}: expected 1 to {MAX_WORKERS} (an Indexed Job's most)"
            )
        if self.gpu_type and gpus < 1:
            raise InputError(
                f"gpus={gpus} with gpu_type={self.gpu_type!r}: give gpus >= 1, or no gpu_type"
            )
        for name in ("unschedulable_timeout", "admission_timeout"):
            if (value := getattr(self, name)) < 0:
                raise InputError(f"{name}={value}: must be >= 0 seconds")
        prior = self.prior_step_seconds
        if not (isinstance(prior, int | float) and math.isfinite(prior) and prior >= 0):
            raise InputError(f"prior_step_seconds={prior!r}: expected seconds per "
                             "step, 0 (unknown) or more")  # fmt: skip
        try:
            placement = Placement(
                pool=self.pool, gpu_type=self.gpu_type, gpu_count=gpus,
                memory_limit=self.memory_limit, retries=self.retries,
                compute_class=self.compute_class, grace_seconds=self.grace_seconds,
                queue=self.queue, priority_class=self.priority_class,
            )  # fmt: skip
            run_seconds = seconds(self.deadline)
        except (PlacementError, ValueError) as err:
            raise InputError(str(err)) from None
        object.__setattr__(self, "placement", placement)
        object.__setattr__(self, "run_seconds", run_seconds)
        self._check_finish_by()

    def _check_finish_by(self) -> None:
        """``finish_by`` as written: a duration, or a time with its zone, a minute to a year away.

        The launcher then keeps the time a duration gave on its first read.
        """
        if not self.finish_by:
            return
        from spottrain.ladder import LadderError
        from spottrain.ladder.decide import finish_by_epoch

        try:
            finish_by_epoch(self.finish_by, time.time())
        except LadderError as err:
            raise InputError(str(err)) from None

    def launcher_settings(self) -> d.Settings:
        """The launcher's :class:`decide.Settings`, made here only."""
        return d.Settings(
            capacity_deadline=self.unschedulable_timeout,
            deadline=self.run_seconds,
            admission_deadline=self.admission_timeout,
        )


@dataclass(frozen=True, kw_only=True)
class RunInputs(GangInputs):
    """One ``train_job`` run's inputs, made in the launcher's pod and handed down whole.

    Besides :class:`GangInputs`: where the run reads and writes (``data_dir``, the
    ``data`` artifact's gs:// folder; ``checkpoint_dir``), its name (``run_id``,
    ``task_name``: KFP's placeholders, resolved) and what its trainer gets
    (``settings``, ``extra_args``).

    Raises:
        InputError: the first input refused, those above before the gang's.
    """

    data_dir: str
    checkpoint_dir: str
    run_id: str
    task_name: str
    settings: TrainSettings
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_args", tuple(self.extra_args))
        self._check_where()
        self._check_gang()

    def _check_where(self) -> None:
        """Refuses what the pods on other nodes could not use; one line naming the value."""
        if not self.checkpoint_dir.startswith("gs://"):
            raise InputError(
                f"checkpoint_dir={self.checkpoint_dir!r}: the JobSet-engine train needs a "
                "gs:// folder that its pods on other nodes can reach"
            )
        if not self.data_dir.startswith("gs://"):
            raise InputError(
                f"data {self.data_dir!r} is not in gs://: its pods cannot read this pod's "
                "files; copy the data with data_dst=gs://... (or use a gs:// pipeline root)"
            )
        for name in ("run_id", "task_name"):
            value = getattr(self, name)
            if not value or _UNRESOLVED in value:
                raise InputError(
                    f"{name}={value!r}: pass dsl.PIPELINE_JOB_ID_PLACEHOLDER / "
                    "dsl.PIPELINE_TASK_NAME_PLACEHOLDER so a retry finds its JobSet"
                )

    def _check_finish_by(self) -> None:
        # Not as written: a retry keeps the time the ledger holds, which a time with its
        # zone may be past by then; component.for_the_deadline checks it against that.
        return
