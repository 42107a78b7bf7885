"""The ``train_job`` component's body on the JobSet engine: inputs → JobSets → launcher → outputs.

Its outputs are the in-pod ``train`` component's (model, metrics, attempts Markdown and
page), built by the same functions, so a pipeline can use either.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence

from spottrain import exits, ledger
from spottrain.placement import Placement
from spottrain.runtime import termination
from spottrain.runtime import train as in_pod
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import kube, launcher, names, preflight, status
from spottrain.runtime.train_job.attempts import gang_attempts
from spottrain.runtime.train_job.inputs import InputError, RunInputs
from spottrain.runtime.train_job.kube import KubeError
from spottrain.runtime.train_settings import TrainSettings
from spottrain.trainer import checkpointing

log = logging.getLogger(__name__)

# KFP's executor pod runs the component in Argo's main container, named "main"
# (argoproj/argo-workflows v4.0.5 workflow/common/common.go:13
# `MainContainerName = "main"`): its image is the trainer image.
KFP_MAIN_CONTAINER = "main"


def _fatal(message: str) -> in_pod.TrainFailed:
    return in_pod.TrainFailed(exits.FATAL_CONFIG, message)


def own_pod(k: kube.Kube) -> dict | None:
    """This launcher's pod (its image and service account), if readable."""
    name = kube.own_pod_name()
    if not name:
        return None
    try:
        return k.read_pod(name)
    except KubeError as err:
        log.warning("cannot read this pod (%s): using the default image and account", err)
        return None


def run_owner(pod: dict | None) -> dict | None:
    """The Argo Workflow this pod belongs to, as an ownerReference for the gang.

    Argo makes the Workflow every pod's controller owner (argo-workflows v4.0.5
    workflow/controller/workflowpod.go:211-213). ``None``: no pod read, or not Argo's.
    """
    for ref in ((pod or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Workflow" and str(ref.get("apiVersion", "")).startswith(
            "argoproj.io/"
        ):
            return {k: ref[k] for k in ("apiVersion", "kind", "name", "uid")}
    return None


def going_for_a_retry(pod: dict | None) -> bool:
    """Whether this pod's SIGTERM leaves the run to a retry, so the gang should stay.

    Disrupted (a drain, preemption: ``DisruptionTarget``) or deleted (``kubectl delete
    pod``: a ``deletionTimestamp``): the run goes on in KFP's retry, which re-attaches.
    A run terminated or stopped is Argo signalling the containers of a pod it does not
    delete (argo-workflows v4.0.5 workflow/controller/exec_control.go:41-49,
    pod/queue.go:118-126): clean up. A run deleted deletes its Workflow, whose garbage
    collection takes the gang too (:func:`run_owner`).
    """
    if pod is None:
        return False
    return bool(status.disruption(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"))


def retry_follows(k: kube.Kube, pod: dict | None) -> Callable[[], bool]:
    """Asked on SIGTERM: whether this pod (as read at start) now goes for a retry."""

    def ask() -> bool:
        if pod is None:  # never read: not known to be going for a retry
            return False
        try:
            me = k.read_pod(pod["metadata"]["name"])
        except KubeError as err:
            log.warning("cannot read this pod after SIGTERM (%s): cleaning up", err)
            return False
        return me is None or going_for_a_retry(me)  # gone already: deleted forcibly

    return ask


def image_and_account(pod: dict | None, default_image: str) -> tuple[str, str]:
    """The trainer image (this pod's own) and service account for the gang's pods."""
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


def worker_sets(
    *,
    run_id: str,
    task_name: str,
    namespace: str,
    image: str,
    args: Sequence[str],
    workers: int,
    placement: Placement,
    on_demand: bool,
    service_account: str = "",
    owner: dict | None = None,
) -> list[js.WorkerSet]:
    """The spot gang and, with ``on_demand`` on a plain pool, the on-demand one.

    Named from the KFP run id and task name only (``names.jobset_name``), so a retry of
    the launcher's pod finds them. A ComputeClass gets no second gang: the class
    itself moves the pods to on-demand nodes (and back), and so does a Kueue queue
    (its ClusterQueue's flavors, in order, at each admission).
    """
    common = dict(
        namespace=namespace, image=image, args=tuple(args), workers=workers,
        service_account=service_account, run=run_id, owner=owner,
    )  # fmt: skip
    out = [
        js.WorkerSet(
            name=names.jobset_name(run_id, task_name), placement=placement, attempt=1, **common
        )
    ]
    if (
        on_demand
        and placement.pool != "on-demand"
        and not placement.compute_class
        and not (placement.queue)
    ):
        out.append(
            js.WorkerSet(
                name=names.jobset_name(run_id, task_name, on_demand=True),
                placement=placement.with_(pool="on-demand", taint=None),
                attempt=2,
                **common,
            )
        )
    return out


def launch(
    k: kube.Kube,
    run: RunInputs,
    *,
    default_image: str = "",
    launcher_options: dict | None = None,
) -> launcher.Outcome:
    """Builds the JobSets from the run's inputs and runs the launcher to the end.

    ``launcher_options``: more (or other) options for :class:`launcher.JobSetLauncher`
    (a test's ``poll_seconds``).

    Raises:
        TrainFailed: a flag the pods would refuse, or a bad ``finish_by`` (exit 64, one line).
        KubeError: an API error (its ``code``).
    """
    # What the pods would refuse (their flags, the gang's size): before anything exists.
    flags = preflight.check(run)
    pod = own_pod(k)
    image, account = image_and_account(pod, default_image)
    sets = worker_sets(
        run_id=run.run_id, task_name=run.task_name, namespace=k.namespace, image=image,
        args=flags, workers=run.workers, placement=run.placement, on_demand=run.on_demand,
        service_account=account, owner=run_owner(pod),
    )  # fmt: skip

    options = dict(
        settings=run.launcher_settings(), poll_seconds=10.0,
        own_pod_disrupted=retry_follows(k, pod), grace_s=own_grace(pod),
        say=lambda line: log.info("%s", line), chief_log=print,
        **for_the_deadline(run.finish_by, run.checkpoint_dir, run.settings, sets,
                           run.prior_step_seconds),
    )  # fmt: skip
    job = launcher.JobSetLauncher(k, sets, **{**options, **(launcher_options or {})})
    previous = launcher.install_sigterm(job)
    try:
        outcome = job.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        ledger.annotate(run.checkpoint_dir, gang_attempts(outcome.attempts))
    except Exception as err:  # noqa: BLE001 - the ledger must never fail the run
        log.warning("could not add the pods to the attempt ledger: %s", err)
    return outcome


def own_grace(pod: dict | None) -> float:
    """This pod's terminationGracePeriodSeconds: what a SIGTERM leaves it to end in."""
    given = ((pod or {}).get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(given) if given is not None else launcher.DEFAULT_GRACE_S


def for_the_deadline(
    finish_by: str,
    checkpoint_dir: str,
    settings: TrainSettings,
    sets: list,
    prior_step_seconds: float = 0.0,
) -> dict:
    """The launcher's ladder options: ``moved`` always, ``for_deadline`` with ``finish_by``.

    Raises:
        TrainFailed: ``finish_by`` is not a deadline (exit 64, one line); the other
            inputs were checked before (:class:`inputs.RunInputs`).
    """
    from spottrain.ladder import LadderError
    from spottrain.ladder.decide import kept_deadline
    from spottrain.ladder.forecast import Prior
    from spottrain.ledger import moves
    from spottrain.ledger.schema import Move
    from spottrain.runtime.train_job.deadline import DeadlineCheck, rung_of

    when = None
    if finish_by:
        rungs = [str(rung_of(ws)) for ws in sets]
        try:
            when = kept_deadline(checkpoint_dir, finish_by, rungs, time.time())
        except LadderError as err:
            raise _fatal(str(err)) from None
    if len(sets) < 2:
        if finish_by:
            log.warning(
                "finish_by=%r: no on-demand gang to move to (a ComputeClass or a queue chooses the "
                "capacity): the deadline is recorded, not acted on",
                finish_by,
            )
        return {}

    def moved(reason: str, here, there) -> None:
        a, b = rung_of(here), rung_of(there)
        try:
            moves.add_move(checkpoint_dir, Move(
                at=time.time(), platform="gke", left=here.name, from_rung=str(a),
                to_rung=str(b), from_capacity=a.capacity, to_capacity=b.capacity,
                reason=reason, finish_by=when,
            ))  # fmt: skip
        except Exception as err:  # noqa: BLE001 - the ledger must never stop a move
            log.warning("could not write the move to the attempt ledger: %s", err)

    options: dict = {"moved": moved}
    if when is not None:
        # The trainer saves every 60 s by default (TrainConfig.save_every_seconds).
        prior = Prior(step_s=prior_step_seconds or None)
        options["for_deadline"] = DeadlineCheck(checkpoint_dir, settings.train_steps, when,
                                                prior=prior)  # fmt: skip
    return options


def run_component(
    *,
    data,
    model,
    metrics,
    attempts,
    report=None,
    classification=None,
    k: kube.Kube | None = None,
    **given,
) -> None:
    """The ``train_job`` component body.

    Takes the component's outputs and its ``data`` artifact, and every other input by
    its name (``given``: :class:`inputs.RunInputs`' fields, typed and checked there;
    components/train_job documents each), its training settings as ``settings``; and
    ``k``, the API (default: this pod's service account, in its namespace). The
    outputs: ``model`` (the chief's, copied from the checkpoint dir), ``metrics`` (the
    training summary and ledger totals), ``attempts`` (the attempt ledger with the
    pods' nodes), ``report`` (the attempts page) and ``classification`` (the task's
    confusion matrix).
    """
    from spottrain.version import IMAGE

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    location = in_pod.data_location(data.path, data.metadata)
    if not location.startswith("gs://") and str(getattr(data, "uri", "")).startswith("gs://"):
        location = data.uri
    try:
        run = RunInputs(data_dir=location, **given)
        outcome = launch(k if k is not None else kube.in_cluster(), run, default_image=IMAGE)
    except (InputError, in_pod.TrainFailed, KubeError) as err:
        log.error("%s", err)
        termination.mark_exit(err.code, str(err))
        raise SystemExit(err.code) from None
    if outcome.code != 0:
        log.error("%s", outcome.message)
        termination.mark_exit(outcome.code, outcome.message)
        raise SystemExit(outcome.code)
    log.info(
        "JobSet %s completed%s after %d restart(s), %d counted",
        outcome.jobset,
        " (after moving to on-demand)" * outcome.moved,
        outcome.restarts,
        outcome.restarts_counted,
    )
    write_outputs(
        checkpoint_dir=run.checkpoint_dir,
        settings=run.settings,
        model=model,
        metrics=metrics,
        attempts=attempts,
        report=report,
        classification=classification,
    )


def write_outputs(
    *, checkpoint_dir: str, settings: TrainSettings, model, metrics, attempts, report,
    classification,
) -> None:  # fmt: skip
    """The KFP outputs of a finished run, from its checkpoint dir (both engines)."""
    from spottrain.copier import copy

    os.makedirs(model.path, exist_ok=True)
    copy(checkpointing.job_model_dir(checkpoint_dir), model.path)
    summary = in_pod.read_summary(model.path)
    for name, value in in_pod.numeric_metrics(summary).items():
        metrics.log_metric(name, value)
    in_pod.write_classification(summary, classification)
    totals = in_pod.write_ledger(checkpoint_dir, metrics, attempts)
    log.info("attempt ledger: %s", json.dumps(totals, sort_keys=True))
    if report is not None:
        in_pod.write_report_safely(checkpoint_dir, settings.tensorboard_dir, report)
    in_pod.update_model_metadata(model, checkpoint_dir, settings, summary)
