"""The ``train_job`` component's body: component inputs → launcher → KFP outputs.

Its outputs are the in-pod ``train`` component's (model, metrics, attempts Markdown),
built by the same functions, so a pipeline can use either.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from typing import Any

from spottrain.placement import Placement, PlacementError, seconds
from spottrain.runtime import train as in_pod
from spottrain.runtime.gke_job import control, kube, manifests, names, status
from spottrain.runtime.train_job.attempts import gang_attempts
from spottrain.trainer import checkpointing, ledger, preemption

log = logging.getLogger(__name__)

# KFP's executor pod runs the component in Argo's main container, named "main"
# (argoproj/argo-workflows v4.0.5 workflow/common/common.go:13
# `MainContainerName = "main"`): its image is the trainer image.
KFP_MAIN_CONTAINER = "main"
_UNRESOLVED = "{{$."


def _fatal(message: str) -> in_pod.TrainFailed:
    return in_pod.TrainFailed(preemption.FATAL_CONFIG, message)


def check_inputs(*, data_dir: str, checkpoint_dir: str, run_id: str, task_name: str) -> None:
    """Refuses inputs the pods on other nodes could not use; one line naming the value."""
    if not checkpoint_dir.startswith("gs://"):
        raise _fatal(
            f"checkpoint_dir={checkpoint_dir!r}: the Job-engine train needs a gs:// folder "
            "that its pods on other nodes can reach"
        )
    if not data_dir.startswith("gs://"):
        raise _fatal(
            f"data {data_dir!r} is not in gs://: the Job's pods cannot read this pod's "
            "files; copy the data with data_dst=gs://... (or use a gs:// pipeline root)"
        )
    for name, value in (("run_id", run_id), ("task_name", task_name)):
        if not value or _UNRESOLVED in value:
            raise _fatal(
                f"{name}={value!r}: pass dsl.PIPELINE_JOB_ID_PLACEHOLDER / "
                "dsl.PIPELINE_TASK_NAME_PLACEHOLDER so a retry finds its Job"
            )


def gangs(
    *,
    run_id: str,
    task_name: str,
    namespace: str,
    image: str,
    args: Sequence[str],
    workers: int,
    placement: Placement,
    on_demand: bool,
    deadline_seconds: int,
    service_account: str = "",
) -> list[manifests.Gang]:
    """The spot gang and, with ``on_demand``, the on-demand one it falls back to.

    A placement with a compute class gets no second gang: the class itself moves
    the pods to on-demand nodes (and back), so two gangs would only compete.
    """
    common = dict(
        namespace=namespace,
        image=image,
        args=tuple(args),
        workers=workers,
        deadline_seconds=deadline_seconds,
        service_account=service_account,
        labels={names.RUN_LABEL: names.label_value(run_id)},
    )
    out = [manifests.Gang(name=names.job_name(run_id, task_name), placement=placement, **common)]
    if on_demand and placement.pool != "on-demand" and not placement.compute_class:
        out.append(
            manifests.Gang(
                name=names.job_name(run_id, task_name, on_demand=True),
                placement=placement.with_(pool="on-demand", taint=None),
                **common,
            )
        )
    return out


def own_pod(k: kube.Kube) -> dict | None:
    """This launcher's pod (its image and service account), if readable."""
    name = kube.own_pod_name()
    if not name:
        return None
    try:
        return k.read_pod(name)
    except kube.KubeError as err:
        log.warning("cannot read this pod (%s): using the default image and account", err)
        return None


def image_and_account(pod: dict | None, default_image: str) -> tuple[str, str]:
    """The trainer image (this pod's own) and service account for the Job's pods."""
    if pod is None:
        return default_image, ""
    spec = pod.get("spec") or {}
    image = next(
        (
            c.get("image")
            for c in spec.get("containers") or []
            if c.get("name") == KFP_MAIN_CONTAINER
        ),
        default_image,
    )
    return image or default_image, spec.get("serviceAccountName") or ""


def launch(
    k: kube.Kube,
    *,
    data_dir: str,
    checkpoint_dir: str,
    run_id: str,
    task_name: str,
    workers: int,
    pool: str,
    gpu_type: str,
    gpus: int,
    memory_limit: str,
    retries: int,
    unschedulable_timeout: int,
    on_demand: bool,
    deadline: str,
    compute_class: str = "",
    grace_seconds: int = 30,
    extra_args: Sequence[str] = (),
    default_image: str = "",
    poll_seconds: float = 10.0,
    launcher_options: dict | None = None,
    **hyperparameters: Any,
) -> control.Outcome:
    """Builds the gangs from the component inputs and runs the launcher to the end.

    Raises:
        TrainFailed: a bad input (exit 64, one line).
        kube.KubeError: an API error (its ``code``).
    """
    check_inputs(data_dir=data_dir, checkpoint_dir=checkpoint_dir, run_id=run_id,
                 task_name=task_name)  # fmt: skip
    if workers < 1:
        raise _fatal(f"workers={workers}: must be >= 1")
    if unschedulable_timeout < 0:
        raise _fatal(f"unschedulable_timeout={unschedulable_timeout}: must be >= 0 seconds")
    try:
        placement = Placement(
            pool=pool, gpu_type=gpu_type, gpu_count=gpus, memory_limit=memory_limit,
            retries=retries, compute_class=compute_class, grace_seconds=grace_seconds,
        )  # fmt: skip
    except PlacementError as err:
        raise _fatal(str(err)) from None
    flags = in_pod.trainer_flags(
        data_dir=data_dir,
        checkpoint_dir=checkpoint_dir,
        model_dir=checkpointing.job_model_dir(checkpoint_dir),
        extra_args=extra_args,
        **hyperparameters,
    )
    pod = own_pod(k)
    image, account = image_and_account(pod, default_image)
    gs = gangs(
        run_id=run_id,
        task_name=task_name,
        namespace=k.namespace,
        image=image,
        args=flags,
        workers=workers,
        placement=placement,
        on_demand=on_demand,
        deadline_seconds=seconds(deadline),
        service_account=account,
    )

    def keep_on_cancel() -> bool:
        # The launcher's own pod disrupted (drain, eviction): its KFP retry
        # re-attaches, so the Job runs on. Anything else (KFP run terminated) cleans up.
        me = own_pod(k) if pod is not None else None
        return bool(me and status.disruption(me))

    launcher = control.Launcher(
        k,
        gs,
        unschedulable_seconds=unschedulable_timeout,
        poll_seconds=poll_seconds,
        keep_on_cancel=keep_on_cancel,
        **(launcher_options or {}),
    )
    previous = control.install_sigterm(launcher)
    try:
        outcome = launcher.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        ledger.annotate(checkpoint_dir, gang_attempts(outcome.attempts))
    except Exception as err:  # noqa: BLE001 - the ledger must never fail the run
        log.warning("could not add the pods to the attempt ledger: %s", err)
    return outcome


def run_component(
    *,
    data,
    model,
    metrics,
    attempts,
    report=None,
    classification=None,
    k: kube.Kube | None = None,
    **kwargs,
) -> None:
    """The ``train_job`` component body.

    Args:
        data: ``Input[Dataset]`` (a gs:// folder, or a gcs_copy pointer to one).
        model: ``Output[Model]``: the chief's model, copied from the checkpoint dir.
        metrics: ``Output[Metrics]``: the training summary and ledger totals.
        attempts: ``Output[Markdown]``: the attempt ledger, with the pods' nodes.
        report: ``Output[HTML]``: the attempts page (:mod:`spottrain.runtime.report`).
        classification: ``Output[ClassificationMetrics]``: the task's confusion matrix.
        k: The API (default: this pod's service account, in its namespace).
        **kwargs: The component's other inputs (see :func:`launch`).
    """
    from spottrain.version import IMAGE

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    location = in_pod.data_location(data.path, data.metadata)
    if not location.startswith("gs://") and str(getattr(data, "uri", "")).startswith("gs://"):
        location = data.uri
    try:
        outcome = launch(
            k if k is not None else kube.in_cluster(),
            data_dir=location,
            default_image=IMAGE,
            **kwargs,
        )
    except (in_pod.TrainFailed, kube.KubeError) as err:
        log.error("%s", err)
        raise SystemExit(err.code) from None
    if outcome.code != 0:
        log.error("%s", outcome.message)
        raise SystemExit(outcome.code)
    log.info(
        "%s%s%s",
        outcome.message,
        " (after falling back to on-demand)" * outcome.failed_over,
        f"; its Job was recreated {outcome.recreations} time(s) to skip the Job "
        "controller's replacement back-off" * bool(outcome.recreations),
    )
    from spottrain.runtime.train_job.component import write_outputs

    write_outputs(kwargs, model, metrics, attempts, report, classification)
