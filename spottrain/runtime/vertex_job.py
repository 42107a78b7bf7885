"""The Vertex fall-back: one pipeline task runs the training as custom jobs, spot first.

GCPC's custom-job launcher creates one job and fails the task when the job fails
(``job_remote_runner.py`` ``poll_job``, GCPC 2.22.0: ``raise RuntimeError('Job failed
with error state…')``), so a spot job that finds no capacity, or is preempted past
Vertex's own restarts, ends the run Failed. This launcher takes the same arguments
and payload, and on a failed job creates the next one from that payload with
another scheduling strategy, resuming the same checkpoint dir, so the task (and with
it the run) ends Succeeded once the training is done.

Why one task and not an exit handler, as on GKE: an exit task runs once the handler's
group has ended and gets its ``PipelineTaskFinalStatus`` (``SUCCEEDED``, ``FAILED`` or
``CANCELLED``: kfp ``dsl/task_final_status.py``), but the failed spot task stays
failed. On KFP OSS the run then reads Failed (docs/gke.md, "Retries"); how Vertex Pipelines
states a run whose task failed and whose exit task succeeded is not public (its
"Configure failure policy" page says only that a run goes on after a failed task).
Inside one task nothing fails unless the training does, whichever reading is right.

What decides is the checkpoint dir, as for the GKE fall-back: a job that made
progress was preempted; one that made none found no capacity (or was preempted
before its first save) and moves on to the fall-back at once; ``FATAL.json`` stops.
A job's error code does not: Vertex reports a worker's non-zero exit as an error
whatever the cause.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spottrain import exits
from spottrain.ladder import VERTEX_STRATEGY, Ladder, LadderError
from spottrain.ladder.forecast import Measured, Prior
from spottrain.ledger import CAPACITY_ENV, bill_labels, usage
from spottrain.ledger.schema import Move
from spottrain.runtime import vertex_ladder, vertex_regions
from spottrain.runtime.fallback_words import (
    CANCELLED,
    COMPLETED,
    FATAL,
    INCOMPLETE,
    RESUME,
    settled,
)
from spottrain.runtime.vertex_ladder import (
    MOVE,
    WAIT,
    Look,
    Step,
    next_step,
    rung_parent,
    rung_payload,
)

log = logging.getLogger(__name__)

STRATEGIES = ("SPOT", "FLEX_START", "STANDARD")
# GCPC polls every 20 s (job_remote_runner.py _POLLING_INTERVAL_IN_SECONDS).
POLL_SECONDS = 20.0
# Tests only: host:port of a JobService served without TLS, and a faster poll.
API_ENV = "SPOTTRAIN_VERTEX_API"
POLL_ENV = "SPOTTRAIN_VERTEX_POLL_SECONDS"
SUCCEEDED = "JOB_STATE_SUCCEEDED"
CANCELLED_STATES = ("JOB_STATE_CANCELLED", "JOB_STATE_CANCELLING")
# GCPC's _JOB_COMPLETE_STATES: a job in any other state is still going.
ENDED = (SUCCEEDED, "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_PAUSED")
# Not running yet: waiting for its capacity (a FLEX_START job queues up to max_wait_duration).
WAITING = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING")
# The walked ladder's rung of a job, as a label (a retried task re-attaches on it).
RUNG_LABEL = "spottrain-rung"
# The endings of decide (words of fallback_words); anything else it returns is the
# strategy to resume on. INCOMPLETE: the budgets are used and the training is not done.
ENDINGS = (COMPLETED, FATAL, CANCELLED, INCOMPLETE)


@dataclass(frozen=True)
class Plan:
    """How many jobs of each strategy, in order.

    Attributes:
        first: The payload's own strategy (``SPOT`` or ``FLEX_START``).
        fallback: The strategy once ``first`` stops making progress.
        first_attempts: Jobs of ``first`` at most; one that makes no progress ends them.
        fallback_attempts: Jobs of ``fallback`` at most.
    """

    first: str = "SPOT"
    fallback: str = "STANDARD"
    first_attempts: int = 3
    fallback_attempts: int = 2

    def __post_init__(self):
        for name in ("first", "fallback"):
            if getattr(self, name) not in STRATEGIES:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected one of {STRATEGIES}")
        if self.first == self.fallback:
            raise ValueError(f"fallback={self.fallback!r} is the job's own strategy")
        for name in ("first_attempts", "fallback_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be >= 1")


@dataclass
class Attempt:
    """One custom job and what it did to the checkpoint dir."""

    strategy: str
    job: str
    state: str = ""
    error: str = ""
    step_before: int = -1
    step_after: int = -1

    @property
    def progressed(self) -> bool:
        """Whether the job saved a newer checkpoint than there was when it started."""
        return self.step_after > self.step_before


def decide(plan: Plan, attempts: Sequence[Attempt], progress: str) -> str:
    """What follows the last job: the strategy to resume on, or an ending.

    Args:
        plan: The strategies and their budgets.
        attempts: The jobs so far, the last one ended.
        progress: :func:`spottrain.runtime.training_status.training_status` of the checkpoint dir.

    Returns:
        One of :data:`ENDINGS` (``INCOMPLETE``: no job is left in the budgets), or the
        strategy of the next job (logged as ``resume on <strategy>``).
    """
    last = attempts[-1]
    if last.state == SUCCEEDED:
        return COMPLETED
    # Ours are cancelled only on SIGTERM: a cancelled job is someone's wish.
    if ending := settled(progress, cancelled=last.state in CANCELLED_STATES):
        return ending
    firsts = sum(a.strategy == plan.first for a in attempts)
    if last.strategy == plan.first and last.progressed and firsts < plan.first_attempts:
        return plan.first
    if sum(a.strategy == plan.fallback for a in attempts) < plan.fallback_attempts:
        return plan.fallback
    return INCOMPLETE


def capacity_kind(strategy: str, reserved: bool) -> str:
    """The ledger's capacity kind (``CAPACITY_ENV``) of a Vertex job's replicas."""
    return "reservation" if reserved else strategy.lower().replace("_", "-")


def capacity(strategy: str, job: dict) -> str:
    """The capacity kind of one attempt's job (its pools may consume a reservation)."""
    reserved = strategy == "STANDARD" and any(
        (p.get("machine_spec") or {}).get("reservation_affinity")
        for p in job["job_spec"]["worker_pool_specs"]
    )
    return capacity_kind(strategy, reserved)


def remove_empty(value):
    """GCPC's ``json_util.recursive_remove_empty``: drops falsy dict values, empty items.

    Rewritten because GCPC is not in the image;
    ``tests/integration/runtime/test_vertex_fallback.py`` compares the two on the compiled payload.
    """
    if isinstance(value, dict):
        out = {k: remove_empty(v) for k, v in value.items() if v}
        return out if out == value else remove_empty(out)
    if isinstance(value, list):
        items = [remove_empty(v) for v in value]
        return [v for v in items if isinstance(v, (int, float, str, bool)) or v]
    return value


# Vertex Pipelines labels every run's jobs with this (GCPC gcp_labels_util.py reads the
# system labels from VERTEX_AI_PIPELINES_RUN_LABELS); the run's id where none is passed.
BILLING_ID_LABEL = "vertex-ai-pipelines-run-billing-id"


def job_for(
    payload: dict, strategy: str, number: int, *, location: str = "", run: str = ""
) -> dict:
    """The custom job of one attempt: the payload with this strategy and capacity kind.

    Also what GCPC's launcher does to every payload: empty fields removed, the run's
    system labels added (``VERTEX_AI_PIPELINES_RUN_LABELS``, user labels win), and
    ``max_wait_duration`` only for ``FLEX_START`` (``remote_runner.py``
    ``create_custom_job_with_client``). Ours too: the labels ``spottrain-run`` (``run``,
    else the run's billing id) and ``spottrain-attempt`` (``<kind>-<number>``, as the
    display name ends), and in each pool's env what its replicas run on
    (``usage.USAGE_ENV``: the pool's ``machine_spec`` in ``location``) and those labels
    (``bill_labels.LABELS_ENV``), for the ledger's record.
    """
    job = remove_empty(copy.deepcopy(payload))
    system = json.loads(os.environ.get("VERTEX_AI_PIPELINES_RUN_LABELS") or "{}")
    scheduling = job["job_spec"].setdefault("scheduling", {})
    scheduling["strategy"] = strategy
    if strategy != "FLEX_START":
        scheduling.pop("max_wait_duration", None)
    kind = capacity(strategy, job)
    ours = bill_labels.gcp_labels(run or system.get(BILLING_ID_LABEL, ""), f"{kind}-{number}")
    job["labels"] = {**system, **ours, **job.get("labels", {})}
    if not job["labels"]:
        job.pop("labels")
    names = (CAPACITY_ENV, usage.USAGE_ENV, bill_labels.LABELS_ENV)
    for pool in job["job_spec"]["worker_pool_specs"]:
        env = [e for e in pool["container_spec"].get("env", []) if e["name"] not in names]
        pool["container_spec"]["env"] = [
            *env,
            {"name": CAPACITY_ENV, "value": kind},
            {
                "name": usage.USAGE_ENV,
                "value": usage.env_value(**usage.from_vertex_pool(pool, location)),
            },
            {"name": bill_labels.LABELS_ENV, "value": bill_labels.env_value(ours)},
        ]
    job["display_name"] = f"{job.get('display_name', 'spottrain-train')}-{kind}-{number}"
    return job


@dataclass
class CustomJobLauncher:
    """Runs the plan's jobs one after the other until one ending.

    Attributes:
        client: An ``aiplatform_v1.JobServiceClient``.
        parent: ``projects/<p>/locations/<region>``.
        payload: The custom job as GCPC's component builds it (JSON object).
        plan: The strategies.
        newest_step: The newest checkpoint step in the checkpoint dir (-1: none).
        progress: ``training_status`` of the checkpoint dir.
        record: Called with each new job's name (``gcp_resources``).
        run_id: The pipeline run's id, for the jobs' ``spottrain-run`` label.
    """

    client: object
    parent: str
    payload: dict
    plan: Plan
    newest_step: Callable[[], int]
    progress: Callable[[], str]
    record: Callable[[str], None] = lambda name: None
    poll_seconds: float = POLL_SECONDS
    attempts: list[Attempt] = field(default_factory=list)
    current: str = ""
    run_id: str = ""
    # The capacity ladder (walk): its deadline, how often to decide, what was measured,
    # where a move is written, and the reservation of a reservation rung.
    ladder: Ladder | None = None
    finish_by: float | None = None
    look_every_s: float = 60.0
    measured: Callable[[], Measured | None] = lambda: None
    moved: Callable[[Move], None] = lambda move: None
    reservation: str = ""
    prior: Prior | None = None
    margin_s: float | None = None  # None: sized by the restart (decide.held_in_hand)
    prices: dict[str, float] = field(default_factory=dict)

    def run(self, attach: str = "") -> str:
        """Runs jobs until an ending; ``attach`` follows an existing job first."""
        strategy = self.plan.first
        if attach:
            job = self._get(attach)
            strategy = job.job_spec.scheduling.strategy.name
            strategy = strategy if strategy in STRATEGIES else self.plan.first
            self.attempts.append(Attempt(strategy, attach, step_before=self.newest_step()))
        while True:
            if not self.attempts or self.attempts[-1].state:
                number = sum(a.strategy == strategy for a in self.attempts) + 1
                self.attempts.append(self._create(strategy, number))
            attempt = self.attempts[-1]
            self.current = attempt.job
            self._ended(attempt, self._wait(attempt.job))
            decision = decide(self.plan, self.attempts, self.progress())
            log.info(
                "%s job %s ended %s (checkpoint step %s -> %s%s): %s",
                attempt.strategy, attempt.job, attempt.state, attempt.step_before,
                attempt.step_after, f"; {attempt.error}" if attempt.error else "",
                decision if decision in ENDINGS else f"{RESUME} on {decision}",
            )  # fmt: skip
            if decision in ENDINGS:
                return decision
            strategy = decision

    def walk(self, attach: str = "") -> str:
        """Walks :attr:`ladder`: a job per rung, moved when :func:`next_step` says so."""
        at, created, said = 0, time.time(), ""
        jobs_here: dict[int, int] = {}
        if attach:
            job = self._get(attach)
            label = job.labels.get(RUNG_LABEL, "0")
            at = min(int(label), len(self.ladder) - 1) if label.isdigit() else 0
            jobs_here[at] = 1
            self.attempts.append(Attempt(job.job_spec.scheduling.strategy.name, attach,
                                         step_before=self.newest_step()))  # fmt: skip
        while True:
            if not self.attempts or self.attempts[-1].state:
                jobs_here[at] = jobs_here.get(at, 0) + 1
                strategy = VERTEX_STRATEGY[self.ladder[at].capacity]
                self.attempts.append(self._create(strategy, jobs_here[at], at))
                created = time.time()
            attempt = self.attempts[-1]
            self.current = attempt.job
            step = self._look(attempt, at, created, jobs_here[at])
            if step.kind == WAIT:
                if step.reason and step.reason != said:  # said once, until it changes
                    log.info("on %s: %s", self.ladder[at], step.reason)
                said = step.reason
                continue
            if step.kind == MOVE:
                self._move(attempt, at, step)
                at = step.to
                continue
            if step.kind in ENDINGS:
                return step.kind
            log.info("again on %s: %s", self.ladder[at], step.reason or "preempted")

    def _look(self, attempt: Attempt, at: int, created: float, jobs_here: int):
        """One look at the current job (polled until it ends or a look is due)."""
        due = time.monotonic() + self.look_every_s
        while True:
            job = self._get(attempt.job)
            ended = job.state.name in ENDED
            if ended or time.monotonic() >= due:
                break
            time.sleep(min(self.poll_seconds, max(0.0, due - time.monotonic())))
        if ended:
            self._ended(attempt, job)
            log.info("%s job %s ended %s (checkpoint step %s -> %s%s)", attempt.strategy,
                     attempt.job, attempt.state, attempt.step_before, attempt.step_after,
                     f"; {attempt.error}" if attempt.error else "")  # fmt: skip
        look = Look(
            ended=ended,
            succeeded=job.state.name == SUCCEEDED,
            waited_s=time.time() - created if job.state.name in WAITING else 0.0,
            progressed=ended and attempt.progressed,
            # Only an ended job's: a running one may still be writing the task's outputs
            # after its last checkpoint, and the task must not end before them.
            settled=settled(self.progress(), cancelled=job.state.name in CANCELLED_STATES)
            if ended
            else None,
            jobs_here=jobs_here,
            measured=self.measured(),
        )
        # A look is due at most every look_every_s, and the job's end is one.
        step = next_step(self.ladder, at, look, budgets=(self.plan.first_attempts,
                         self.plan.fallback_attempts), now=time.time(),
                         finish_by=self.finish_by, look_every_s=self.look_every_s,
                         prior=self.prior, margin_s=self.margin_s,
                         prices=self.prices or None)  # fmt: skip
        return step

    def _move(self, attempt: Attempt, at: int, step: Step) -> None:
        """Writes the move, then cancels the job left (its trainer saves on the notice)."""
        here, there = self.ladder[at], self.ladder[step.to]
        f = step.forecast
        finish = time.time() + f.finish_s if f and math.isfinite(f.finish_s) else None
        self.moved(Move(at=time.time(), platform="vertex", left=attempt.job,
                        from_rung=str(here), to_rung=str(there), from_capacity=here.capacity,
                        to_capacity=there.capacity, reason=step.reason, rule=step.rule,
                        finish_by=self.finish_by, forecast_finish=finish,
                        forecast_cost=f.cost if f else None))  # fmt: skip
        log.info("move from %s to %s: %s", here, there, step.reason)
        if not attempt.state:
            self.client.cancel_custom_job(name=attempt.job)
            self._ended(attempt, self._wait(attempt.job))
            log.info("%s job %s left: %s (checkpoint step %s -> %s)", attempt.strategy,
                     attempt.job, attempt.state, attempt.step_before,
                     attempt.step_after)  # fmt: skip

    def _ended(self, attempt: Attempt, job) -> None:
        """Notes how ``attempt``'s job ended and the checkpoint it left."""
        attempt.state, attempt.error = job.state.name, job.error.message
        attempt.step_after = self.newest_step()

    def cancel(self) -> None:
        """Cancels the running job (the pipeline task was cancelled)."""
        if self.current:
            log.info("cancelling %s", self.current)
            self.client.cancel_custom_job(name=self.current)

    def _create(self, strategy: str, number: int, at: int | None = None) -> Attempt:
        step = self.newest_step()
        payload, parent = self.payload, self.parent
        if at is not None:
            payload = rung_payload(payload, self.ladder[at], reservation=self.reservation)
            parent = rung_parent(parent, self.ladder[at])
        custom_job = job_for(
            payload, strategy, number, location=parent.rsplit("/", 1)[-1], run=self.run_id
        )
        if at is not None:
            custom_job["labels"][RUNG_LABEL] = str(at)
        job = self.client.create_custom_job(parent=parent, custom_job=custom_job)
        log.info("created %s job %s (checkpoint step %s)", strategy, job.name, step)
        self.record(job.name)
        return Attempt(strategy, job.name, step_before=step)

    def _get(self, name: str):
        # GCPC's get_custom_job_with_client: the client's retry for up to 10 minutes.
        from google.api_core import retry as retries

        return self.client.get_custom_job(name=name, retry=retries.Retry(timeout=600))

    def _wait(self, name: str):
        while True:
            job = self._get(name)
            if job.state.name in ENDED:
                return job
            time.sleep(self.poll_seconds)


def job_client(location: str):
    """The Vertex JobService client of a region (or of the tests' ``API_ENV``)."""
    from google.cloud import aiplatform_v1

    if os.environ.get(API_ENV):
        import grpc
        from google.cloud.aiplatform_v1.services.job_service.transports import (
            JobServiceGrpcTransport,
        )

        channel = grpc.insecure_channel(os.environ[API_ENV])
        return aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))
    endpoint = f"{location}-aiplatform.googleapis.com"
    return aiplatform_v1.JobServiceClient(client_options={"api_endpoint": endpoint})


def resource_uri(location: str, name: str) -> str:
    """The job's URI in ``gcp_resources`` (GCPC's ``job_uri_prefix`` + name)."""
    return f"https://{location}-aiplatform.googleapis.com/v1/{name}"


def write_resources(path: str, location: str, name: str) -> None:
    """Writes ``gcp_resources`` naming the current job.

    One resource, as GCPC's ``check_if_job_exists`` requires; the job Vertex links to.
    """
    doc = {
        "resources": [{"resourceType": "CustomJob", "resourceUri": resource_uri(location, name)}]
    }
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f)


def attached_job(path: str, location: str) -> str:
    """The job a previous try of this task left in ``gcp_resources``, or ``""``."""
    if not (os.path.exists(path) and os.path.getsize(path)):
        return ""
    with open(path) as f:
        uri = json.load(f)["resources"][-1]["resourceUri"]
    return uri.removeprefix(resource_uri(location, ""))


def _seconds(text: str) -> float:
    """A pipeline parameter's seconds: ``""`` is 0 (unknown), else a number of 0 or more."""
    try:
        value = float(text) if str(text).strip() else 0.0
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value < 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds of 0 or more")
    return value


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """GCPC's custom-job launcher arguments, plus the plan and the checkpoint dir."""
    p = argparse.ArgumentParser(prog="python -m spottrain.runtime.vertex_job")
    p.add_argument("--type", default="CustomJob")
    p.add_argument("--project", required=True)
    p.add_argument("--location", required=True)
    p.add_argument("--payload", required=True)
    p.add_argument("--gcp_resources", required=True)
    p.add_argument("--fallback_strategy", default="STANDARD")
    p.add_argument("--first_attempts", type=int, default=3)
    p.add_argument("--fallback_attempts", type=int, default=2)
    p.add_argument("--checkpoint_dir", required=True)
    p.add_argument("--train_steps", type=int, required=True)
    # dsl.PIPELINE_JOB_ID_PLACEHOLDER; unresolved ("{{$..."), the run's billing id serves.
    p.add_argument("--run_id", default="")
    # The capacity ladder (docs/deadline.md): with either, the launcher walks a ladder
    # (the plan's two strategies when --ladder is empty) and decides at every look.
    p.add_argument("--ladder", default="")
    p.add_argument("--finish_by", default="")
    p.add_argument("--look_every_seconds", type=float, default=60.0)
    p.add_argument("--save_every_seconds", type=float, default=60.0)
    p.add_argument("--reservation", default="")
    # The forecast's prior until measured, and the least time held in hand.
    p.add_argument("--prior_preemptions_per_hour", type=float, default=Prior.preemptions_per_hour)
    p.add_argument("--prior_restart_seconds", type=float, default=Prior.restart_s)
    # Seconds per step on the ladder's first rung, before one is measured (0: unknown,
    # and a deadline then starts the run on on-demand until one is).
    p.add_argument("--prior_step_seconds", type=_seconds, default=0.0)
    # Unset: a third of the restart, at least 60 s (decide.held_in_hand).
    p.add_argument("--margin_seconds", type=float, default=None)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the plan; exits 0 when trained, 64 when a retry cannot help."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if problem := vertex_regions.region_problem(args.location):
        # Its API host does not exist: read as unreachable, every retry would fail the same.
        log.error("--location %r %s", args.location, problem)
        return exits.FATAL_CONFIG
    try:
        payload = json.loads(args.payload, strict=False)
        plan = Plan(
            first=payload["job_spec"].get("scheduling", {}).get("strategy") or "SPOT",
            fallback=args.fallback_strategy,
            first_attempts=args.first_attempts,
            fallback_attempts=args.fallback_attempts,
        )
    except (ValueError, KeyError, TypeError) as err:
        log.error("bad fall-back settings: %s", err)
        return exits.FATAL_CONFIG
    from google.api_core import exceptions

    from spottrain.runtime.training_status import training_status
    from spottrain.trainer import checkpointing

    def newest_step() -> int:
        return max((s for s, _ in checkpointing.list_checkpoints(args.checkpoint_dir)), default=-1)

    launcher = CustomJobLauncher(
        client=job_client(args.location),
        parent=f"projects/{args.project}/locations/{args.location}",
        payload=payload,
        plan=plan,
        newest_step=newest_step,
        progress=lambda: training_status(args.checkpoint_dir, args.train_steps),
        record=lambda name: write_resources(args.gcp_resources, args.location, name),
        poll_seconds=float(os.environ.get(POLL_ENV) or POLL_SECONDS),
        run_id="" if "{{" in args.run_id else args.run_id,
    )

    def on_sigterm(signum, frame):
        launcher.cancel()
        sys.exit(exits.PREEMPTED)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        if args.ladder or args.finish_by:
            vertex_ladder.set_up(launcher, args, payload, plan)
            # Read at every look: its line per read would drown the walk's own.
            logging.getLogger("spottrain.runtime.training_status").setLevel(logging.WARNING)
        attach = attached_job(args.gcp_resources, args.location)
        decision = launcher.walk(attach) if launcher.ladder else launcher.run(attach)
    except LadderError as err:
        log.error("%s", err)
        return exits.FATAL_CONFIG
    except exceptions.TooManyRequests as err:
        # RESOURCE_EXHAUSTED: a quota; a retry of the task re-attaches and goes on.
        log.error("Vertex quota: %s", err)
        return exits.UNAVAILABLE
    except exceptions.ClientError as err:
        # Refused as sent (INVALID_ARGUMENT, PERMISSION_DENIED, ...): no retry helps.
        log.error("Vertex refused the custom job: %s", err)
        return exits.FATAL_CONFIG
    except exceptions.GoogleAPIError as err:
        log.error("Vertex AI unreachable: %s", err)
        return exits.UNAVAILABLE
    if decision == COMPLETED:
        return exits.OK
    if decision == INCOMPLETE:
        log.error("no job finished the training: %s", _summary(launcher.attempts))
        return exits.UNAVAILABLE
    log.error("%s after %s", decision, _summary(launcher.attempts))
    return exits.FATAL_CONFIG


def _summary(attempts: Sequence[Attempt]) -> str:
    return ", ".join(f"{a.strategy} {a.state} ({a.step_before}->{a.step_after})" for a in attempts)


if __name__ == "__main__":
    sys.exit(main())
