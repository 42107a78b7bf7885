"""The attempt ledger: one JSON record per attempt, beside the checkpoints.

Pod logs vanish with the pod; this file survives, so after a run you can see
how many attempts it took, how each ended, how many steps each lost and what
spot capacity saved. The chief holding the dir's lease writes its attempt's
record; a run the lease refused adds a ``refused`` record; the JobSet-engine
launcher adds where pods ran. Every write merges its own records into the file
as it is now, by compare-and-swap (:mod:`spottrain.versioned`), so no
writer loses another's record. An attempt killed outright (SIGKILL, node gone)
cannot write its own ending: the next attempt closes its record from the last
progress it saw.

Each record is a :class:`~spottrain.ledger.schema.Record`. This package is the
ledger's room: the engine writes it, the outputs, launchers and pages read it here
(its figures in :mod:`~spottrain.ledger.attempt_cost`, what an attempt ran on in
:mod:`~spottrain.ledger.usage`, the bill's labels in :mod:`~spottrain.ledger.bill_labels`),
never through the trainer.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid

from spottrain import diagnostics, exits, fileio, versioned
from spottrain.ledger import attempt_cost, bill_labels, schema, usage
from spottrain.ledger.schema import INTERRUPTED_OUTCOMES, Record

log = logging.getLogger(__name__)

LEDGER = "attempts.json"
# Set by the pipelines where the capacity kind is known when they are compiled (a
# Vertex job's strategy or reservation, a GKE task's pool): each record names it.
# JobSet-engine records get the node's own kind instead (annotate: node_kind).
CAPACITY_ENV = "SPOTTRAIN_CAPACITY"
# When the attempt's supervisor started, in epoch seconds (spottrain.trainer.watchdog
# sets it): its machines are held from then, not from when its trainer, after
# importing TensorFlow, opens its record.
STARTED_ENV = "SPOTTRAIN_ATTEMPT_STARTED"


def store(checkpoint_dir: str):
    """The ledger file of ``checkpoint_dir``, read and swapped by :mod:`spottrain.versioned`."""
    return versioned.store(fileio.join(checkpoint_dir, LEDGER))


def read(checkpoint_dir: str) -> list[Record]:
    """The records in ``checkpoint_dir`` (empty when there is no ledger)."""
    data, _ = store(checkpoint_dir).read()
    return schema.records(data)


def _attempt_started() -> float:
    """When this attempt began: its supervisor's start, else now (epoch seconds)."""
    try:
        return min(float(os.environ[STARTED_ENV]), time.time())
    except (KeyError, ValueError):
        return time.time()


def _key(record: Record) -> str:
    """What identifies a record across writers (records before ids had none)."""
    return record.get("id") or f"started:{record.get('started')}"


def merge(stored: dict | None, changed: list[Record]) -> dict:
    """The ledger file ``stored`` with ``changed`` records replaced or appended.

    Records are numbered in the order they were first written.
    """
    records = schema.records(stored)  # one of another shape: as unreadable
    index = {_key(r): i for i, r in enumerate(records)}
    for rec in changed:
        if _key(rec) in index:
            records[index[_key(rec)]] = rec
        else:
            records.append(rec)
    for number, rec in enumerate(records, 1):
        rec["attempt"] = number
    # The launchers' ladder and moves (schema.RUN_KEYS) stay as they are; a record a
    # move ended says so (written before or after the move: either order marks it).
    run = schema.run_keys(stored)
    schema.mark_moves(records, run.get("moves", []))
    return {**run, "attempts": records, "totals": totals(records)}


def totals(records: list[Record]) -> dict:
    """Sums over attempts: counts, steps lost, seconds; spent, saved and lost once priced."""
    out = {
        "attempts": len(records),
        # Attempts that got a preemption notice (saved in time or not), not a move's.
        "preemptions": sum(schema.preempted(r) for r in records),
        # Every attempt the platform or a fault ended before the run did: preemptions,
        # kills without notice, lost peers, hangs (not the run's own moves).
        "interruptions": sum(schema.interrupted(r) for r in records),
        # Attempts a ladder move ended: its launcher's cancel was their notice.
        "moved": sum(schema.moved(r) for r in records),
        "steps_lost": sum(r.get("steps_lost") or 0 for r in records),
        # Runs the dir's writer lease turned away (they never trained).
        "refused": sum(r.get("outcome") == "refused" for r in records),
        "seconds": round(sum(r.get("seconds") or 0 for r in records), 1),
    }
    # spent, saved, lost and currency, once the run's outputs priced the records.
    out.update(attempt_cost.run_totals(records))
    return out


# What the JobSet-engine launcher adds to an attempt's record: where its pods ran
# (the gang: "<jobset>/<restart attempt>") and what the chief's node was (usage.FIELDS).
POD_FIELDS = ("node", "node_kind", "disruption", "pod_exit_codes", "pods", "gang", *usage.FIELDS)


def annotate(checkpoint_dir: str, gang_attempts: list[dict], slack_s: float = 60.0) -> int:
    """Adds where each attempt ran (seen by the JobSet-engine launcher) to its record.

    Only the launcher sees nodes and pod ends, and only the chief's trainer writes
    records; so the launcher calls this once no pod of the run is left, and an
    attempt's record is the one whose start falls within a chief pod's run.

    Args:
        checkpoint_dir: The run's folder (``attempts.json``).
        gang_attempts: One per chief pod: ``started`` and ``finished`` (epoch
            seconds) and any of ``POD_FIELDS``.
        slack_s: Clock skew and start-up allowed around a pod's run.

    Returns:
        How many records were annotated.
    """
    records = read(checkpoint_dir)
    annotated = 0
    free = [g for g in gang_attempts if g.get("started") is not None and g.get("finished")]
    for rec in records:
        began = rec.get("started")
        if began is None or "node" in rec or not free:
            continue

        def distance(gang: dict, began: float = began) -> float:
            # 0 inside the pod's run, else how far outside it the attempt began.
            return max(gang["started"] - began, began - gang["finished"], 0.0)

        best = min(free, key=distance)
        if distance(best) <= slack_s:
            if "usage_from" in best:  # the node's usage replaces the compiled one whole
                for k in usage.FIELDS:
                    rec.pop(k, None)
            rec.update({k: best[k] for k in POD_FIELDS if k in best})
            free.remove(best)
            annotated += 1
    if annotated:
        changed = [r for r in records if "node" in r]
        store(checkpoint_dir).update(lambda stored: merge(stored, changed))
    return annotated


def price(checkpoint_dir: str, price_of: attempt_cost.Price | None) -> list[Record]:
    """Writes each record's spent, saved and lost (:mod:`attempt_cost`) into the ledger.

    Called once the run's outputs are written (never by the training loop). Never
    raises: a ledger that cannot be priced or written is logged and returned as read.

    Returns:
        The records, priced where the price function knew the prices.
    """
    try:
        records = read(checkpoint_dir)
    except Exception as e:  # noqa: BLE001 - prices never fail a run
        log.warning("could not read the attempt ledger in %s: %s", checkpoint_dir, e)
        return []
    if not records:
        return records
    # Priced outside the file's compare-and-swap: a price source's wait holds no lock.
    priced = attempt_cost.price_records(records, price_of)
    try:
        return store(checkpoint_dir).update(lambda stored: merge(stored, priced))["attempts"]
    except Exception as e:  # noqa: BLE001 - prices never fail a run
        log.warning("could not write the priced attempt ledger in %s: %s", checkpoint_dir, e)
        return priced


class Ledger:
    """Appends and updates this attempt's record (a no-op on non-chief workers)."""

    def __init__(
        self,
        checkpoint_dir: str,
        enabled: bool,
        *,
        workers: int = 1,
        price_per_hour: float = 0.0,
        on_demand_price_per_hour: float = 0.0,
        min_interval_s: float = 2.0,
    ):
        self.path = fileio.join(checkpoint_dir, LEDGER)
        self.dir = checkpoint_dir
        self.enabled = enabled and bool(checkpoint_dir)
        self.workers = workers
        # The user's own prices (the trainer's flags): attempt_cost prices by them.
        self.prices_given = {
            k: v
            for k, v in (
                ("price_per_hour", price_per_hour),
                ("on_demand_price_per_hour", on_demand_price_per_hour),
            )
            if v
        }
        self.min_interval_s = min_interval_s
        self.records: list[Record] = []
        self.current: Record | None = None
        # The records this writer opened or closed: what its writes merge in.
        self._mine: dict[str, Record] = {}
        self._store = None
        self._last_write = 0.0
        # The newest record before this attempt's with steps (a resume corrects it).
        self._previous: Record | None = None
        # A notice is recorded from a thread of its own, beside the step loop's writes.
        self._lock = threading.RLock()

    def begin(self, start_step: int) -> Record | None:
        """Opens this attempt's record; closes previous attempts that died silently.

        Called by the lease's holder only, so a record still ``running`` is an
        attempt that can no longer write.
        """
        if not self.enabled:
            return None
        data, _ = self._versioned().read()
        # {}: not JSON; a wrong shape (schema.problem) is as unreadable.
        why = "not JSON" if data == {} else schema.problem(data)
        quarantined = schema.set_aside(self.dir, self.path, why) if why else None
        self.records = schema.records(data)
        for prev in [r for r in self.records if r.get("outcome") == "running"]:
            self._close_silent(prev, start_step)
        with_steps = [r for r in self.records if "saved_step" in r]
        self._previous = with_steps[-1] if with_steps else None
        self.current = self._new_record(
            start_step=start_step, last_step=start_step, saved_step=start_step
        )
        # Counted from the supervisor's start, as the deputy counts a gang that never formed.
        self.current["started"] = _attempt_started()
        if quarantined:
            self.current["previous_ledger_quarantined"] = quarantined
        self.records.append(self.current)
        self._write(force=True)
        return self.current

    def _new_record(self, **fields) -> Record:
        """A record of this writer's; ``attempt`` is provisional until merged."""
        rec = {"id": uuid.uuid4().hex[:12], "attempt": len(self.records) + 1}
        rec.update(started=time.time(), **fields, outcome="running", workers=self.workers)
        if os.environ.get(CAPACITY_ENV):
            rec["capacity"] = os.environ[CAPACITY_ENV]
        # What it runs on, where the engine knows it now (usage.USAGE_ENV): Vertex's job
        # spec, the compiled GKE placement; the JobSet launcher adds the node's later.
        rec.update(usage.from_env(os.environ))
        if self.prices_given:
            rec[attempt_cost.PRICES_GIVEN] = dict(self.prices_given)
        if labels := bill_labels.from_env(os.environ):
            rec["bill_labels"] = labels  # its job's or pods' labels: the bill's join key
        self._mine[_key(rec)] = rec
        return rec

    def _close_silent(self, prev: Record, start_step: int) -> None:
        last_sign = prev.get("updated", prev["started"])
        dumped = diagnostics.last_hang_dump(self.dir, since=prev["started"])
        if dumped is not None:
            prev["outcome"] = "hang"
            # Its supervisor (or the launcher, for a frozen worker) killed it then: it
            # held its machines until that moment even if no step (a hung start-up)
            # updated its record, and it had finished the step the dump names,
            # which may be later than its last progress write.
            last_sign = max(last_sign, dumped[0])
            if dumped[1] is not None:
                prev["last_step"] = max(prev.get("last_step", start_step), dumped[1])
        elif "notice_step" in prev or diagnostics.notice_between(
            self.dir, prev["started"], _attempt_started()
        ):
            # The notice came (a supervisor noted it if the trainer could not), then the
            # platform killed the attempt: before a save's files were complete (KFP pod
            # on GKE: docs/preemption.md), or after its final save, while it evaluated
            # or exported (then its last step is saved, and it lost nothing).
            saved = (prev.get("saved_step") or 0) >= (prev.get("last_step") or 0)
            prev["outcome"] = "preempted" if saved else "preempted_unsaved"
        else:
            prev["outcome"] = "killed"
        prev["exit_code"] = None
        # Everything after the step this attempt resumes from was redone.
        prev["steps_lost"] = max(0, prev.get("last_step", start_step) - start_step)
        # Progress is written every few seconds, so a killed attempt may have
        # gone a little further than its record says.
        prev["steps_lost_is_lower_bound"] = True
        self._close_times(prev, last_sign)
        self._mine[_key(prev)] = prev
        log.warning(
            "previous attempt %d ended without a record (%s); it lost %d step(s)",
            prev["attempt"],
            prev["outcome"],
            prev["steps_lost"],
        )

    def refused(self, code: int, message: str, since: float) -> None:
        """Adds the record of a run the dir's lease turned away (it never trained).

        Args:
            code: Its exit code.
            message: The line naming the holder.
            since: When it began waiting for the lease (its cost counts from there).
        """
        if not self.enabled:
            return
        rec = self._new_record()  # numbered when merged into the file
        rec.update(started=since, outcome="refused", exit_code=code, message=message)
        self._close_times(rec, time.time())
        self._write(force=True)

    def gang_never_formed(self, code: int, message: str, since: float, window_s: float) -> bool:
        """Records an attempt whose gang never took a step and whose chief left no record.

        Called by the deputy (the first non-chief worker) when its start-up timed
        out: a chief that started opened its record before MWMS start-up, so a
        record begun within ``window_s`` (the start-up timeout) before ``since`` is
        this attempt's; without one, the chief never ran and nobody else records it.

        Args:
            code: The deputy's exit code (hung).
            message: What it saw.
            since: When its supervisor started (the attempt's cost counts from there).
            window_s: How long before ``since`` a chief of this attempt could have begun.

        Returns:
            Whether a record was added.
        """
        if not self.enabled:
            return False
        data, _ = self._versioned().read()
        if any((r.get("started") or 0) >= since - window_s for r in schema.records(data)):
            return False
        rec = self._new_record()
        rec.update(started=since, outcome="hang", exit_code=code, message=message, steps_lost=0)
        self._close_times(rec, time.time())
        self._write(force=True)
        return True

    def close_start(self, since: float, code: int, message: str, reason: str) -> Record | None:
        """Closes, for its supervisor, the record of an attempt that took no step.

        The attempt began at ``since`` (its supervisor's start, the record's
        ``started``). Its record, if its trainer opened one, is closed when still
        running; without one (the trainer never got that far), one is added.

        Returns:
            The record closed or added, None when the trainer had closed its own.
        """
        if not self.enabled:
            return None
        data, _ = self._versioned().read()
        self.records = schema.records(data)
        mine = [r for r in self.records if abs((r.get("started") or 0) - since) < 1e-3]
        if mine and mine[-1].get("outcome") != "running":
            return None
        if mine:
            self.current = mine[-1]
            self._mine[_key(self.current)] = self.current
        else:
            self.current = self._new_record(start_step=0, last_step=0, saved_step=0)
            self.current["started"] = since
        return self.end(code, message, notice=(self.current.get("start_step") or 0, reason))

    def set_start(self, step: int) -> None:
        """Corrects this attempt's start step once the checkpoint is actually restored.

        The restored step is also the truth about the attempt before: a save of its
        that completed after its record's last write (a background save finishing as
        a peer died or the platform killed it) is what this attempt resumed from.
        """
        with self._lock:  # the notice's thread may end the attempt meanwhile
            if not self.current:
                return
            # Training resumes now: the time since the attempt began is its restart
            # (attempt_cost prices it into the previous attempt's "lost").
            self.current["resumed_at"] = time.time()
            prev, corrected = self._previous, False
            if (
                prev is not None
                and prev.get("outcome") in (*INTERRUPTED_OUTCOMES, "nan")
                # It trained (not a retry that FATAL.json stopped before any step).
                and (prev.get("last_step") or 0) > (prev.get("start_step") or 0)
                and (prev.get("start_step") or 0) <= step
                and step != prev.get("saved_step")
            ):
                if step > (prev.get("saved_step") or 0):
                    prev["saved_step"] = step
                    prev["saved_step_seen_by_next_attempt"] = True
                prev["last_step"] = max(prev.get("last_step") or 0, step)
                # What is trained again: back to a diverged save's predecessor, too.
                prev["steps_lost"] = prev["last_step"] - step
                self._mine[_key(prev)] = prev
                corrected = True
                log.info("attempt %s lost %d step(s)", prev.get("attempt"), prev["steps_lost"])
            if self.current["start_step"] != step or corrected:
                self.current.update(start_step=step, last_step=step, saved_step=step)
            self._write(force=True)

    def progress(
        self,
        step: int,
        saved_step: int | None = None,
        *,
        force: bool = False,
        seconds_per_step: float | None = None,
    ) -> None:
        """Notes a finished step, and a save whose files are complete.

        Written at most every ``min_interval_s``, at once for a save (``force``: also
        at a save's start, so that a kill during it counts the steps up to it). Only
        complete saves count: a background save still writing (or one that fails) is
        not yet something a next attempt can resume from. ``seconds_per_step``: the
        attempt's steady speed so far (its first call, which traces, left out).
        """
        if not self.current:
            return
        with self._lock:
            if seconds_per_step:
                self.current["seconds_per_step"] = round(seconds_per_step, 6)
            self.current["last_step"] = max(step, self.current.get("last_step") or 0)
            if saved_step is not None:
                self.current["saved_step"] = saved_step
            self._write(force=force or saved_step is not None)

    def first_step(self) -> None:
        """Notes this attempt's first step done: its restart ended there (written at once).

        After the restore (``resumed_at``) come the input's fast-forward to the start
        step and the step's first trace: the attempts page shows them as the restart's
        last part, and ``lost`` prices them with it.
        """
        if not self.current:
            return
        with self._lock:
            self.current["first_step_at"] = time.time()
            self._write(force=True)

    def notice(self, step: int, reason: str) -> None:
        """Records a preemption notice acted on at ``step`` (written at once)."""
        if not self.current:
            return
        with self._lock:
            self._note(step, reason)
            self._write(force=True)

    def _note(self, step: int, reason: str) -> None:
        if "notice_step" not in self.current or step > self.current["notice_step"]:
            self.current.update(notice_step=step, notice_reason=reason, notice_at=time.time())
        self.current["last_step"] = max(step, self.current.get("last_step") or 0)

    def end(
        self, code: int, message: str = "", notice: tuple[int, str] | None = None
    ) -> Record | None:
        """Closes this attempt with its exit code; returns the record.

        ``notice``: (step, reason) of a notice it ends on, recorded as :meth:`notice`
        does, in the same write.
        """
        with self._lock:  # the notice's thread may end the attempt meanwhile
            if not self.enabled:
                return None
            if self.current is None:
                # Failed before training began (a bad config, found by the supervisor
                # without the lease): only its own record, leaving others' as they are.
                self.current = self._new_record(start_step=0, last_step=0, saved_step=0)
            rec = self.current
            if notice is not None:
                self._note(*notice)
            rec["outcome"] = exits.outcome(code)
            rec["exit_code"] = code
            if message:
                rec["message"] = message
            # A clean exit saves at its last step; a NaN stop leaves the last good save.
            clean = code in (exits.OK, exits.PREEMPTED)
            rec["steps_lost"] = 0 if clean else rec["last_step"] - rec["saved_step"]
            self._close_times(rec, time.time())
            self._write(force=True)
            return rec

    def _close_times(self, rec: Record, ended: float) -> None:
        rec["ended"] = ended
        rec["seconds"] = round(ended - rec["started"], 2)

    def _versioned(self):
        if self._store is None:
            self._store = versioned.store(self.path)
        return self._store

    def _write(self, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_write < self.min_interval_s:
            return
        with self._lock:
            if self.current is not None:
                self.current["updated"] = time.time()
            changed = list(self._mine.values())
            try:
                data = self._versioned().update(lambda stored: merge(stored, changed))
                self.records = data["attempts"]
                self._last_write = now
            except Exception as e:  # noqa: BLE001 - the ledger must never stop training
                log.warning("could not write the attempt ledger %s: %s", self.path, e)
