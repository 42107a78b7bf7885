"""What a notice does by phase (spottrain/trainer/notice_phase.py), and how the ledger
closes an attempt that ended on one without its trainer's help. Fast, no TensorFlow."""

from __future__ import annotations

import json
import time

import pytest

from spottrain import exits
from spottrain import ledger as ledger_lib
from spottrain.trainer import notice_phase
from spottrain.trainer.notice_phase import FINISHING, STARTING, TRAINING


class Ended(Exception):
    """end_now does not return: the test's stands in for the process exit."""


def _phases():
    ended, told = [], []

    def end_now(reason, doing):
        ended.append((reason, doing))
        raise Ended

    return notice_phase.Phases(end_now, told.append), ended, told


@pytest.mark.parametrize(
    "phase, record_open, ends",
    [
        (STARTING, True, True),  # nothing trained, the record can say so: at once
        (STARTING, False, False),  # TensorFlow's import: when the record opens
        (TRAINING, True, False),  # the step loop saves at the next boundary
        (FINISHING, True, False),  # the checkpoint is complete: evaluation goes on
    ],
)
def test_a_notice_ends_the_attempt_only_before_its_first_step(phase, record_open, ends):
    phases, ended, told = _phases()
    phases.starting("while a checkpoint was restored")
    if record_open:
        phases.opened()
    phases.enter(phase)
    if ends:
        with pytest.raises(Ended):
            phases.notice("SIGTERM")
        assert ended == [("SIGTERM", "while a checkpoint was restored")]
    else:
        assert phases.notice("SIGTERM") == phase and not ended
    assert told == ["while a checkpoint was restored"]  # the supervisor hears each


def test_a_notice_heard_before_the_record_opens_ends_the_attempt_when_it_does():
    phases, ended, _ = _phases()
    assert phases.notice("SIGTERM") == STARTING and not ended
    with pytest.raises(Ended):
        phases.opened()
    assert ended == [("SIGTERM", "while TensorFlow and the task started")]


def _running(ckpt, started: float, **fields) -> dict:
    rec = {"id": "a1", "attempt": 1, "started": started, "start_step": 20, "last_step": 20,
           "saved_step": 20, "outcome": "running", "workers": 2, **fields}  # fmt: skip
    (ckpt / ledger_lib.LEDGER).write_text(json.dumps({"attempts": [rec]}))
    return rec


def test_the_supervisor_closes_the_record_its_stuck_trainer_opened(tmp_path):
    since = time.time() - 5
    _running(tmp_path, since)
    led = ledger_lib.Ledger(str(tmp_path), True, workers=2)
    rec = led.close_start(since, exits.PREEMPTED, "preempted (SIGTERM) while ...", "SIGTERM")
    (stored,) = ledger_lib.read(str(tmp_path))
    assert stored == rec and stored["id"] == "a1"
    assert stored["outcome"] == "preempted" and stored["steps_lost"] == 0
    assert stored["notice_step"] == 20 and stored["notice_reason"] == "SIGTERM"
    assert stored["seconds"] == pytest.approx(time.time() - since, abs=2)


def test_the_supervisor_adds_a_record_when_its_trainer_opened_none(tmp_path):
    since = time.time() - 3
    _running(tmp_path, since - 100, outcome="preempted")  # an earlier attempt's
    led = ledger_lib.Ledger(str(tmp_path), True, workers=2)
    led.close_start(since, exits.PREEMPTED, "preempted (SIGTERM) while ...", "SIGTERM")
    first, added = ledger_lib.read(str(tmp_path))
    assert first["id"] == "a1" and first["outcome"] == "preempted"
    assert added["started"] == since and added["outcome"] == "preempted", added


def test_a_record_its_trainer_closed_is_left_as_it_is(tmp_path):
    since = time.time() - 3
    _running(tmp_path, since, outcome="preempted", message="the trainer's own line")
    led = ledger_lib.Ledger(str(tmp_path), True)
    assert led.close_start(since, exits.PREEMPTED, "not this", "SIGTERM") is None
    (stored,) = ledger_lib.read(str(tmp_path))
    assert stored["message"] == "the trainer's own line"


@pytest.mark.parametrize(
    "last_step, outcome",
    [(40, "preempted"), (47, "preempted_unsaved")],  # saved 40: killed after, or before
)
def test_an_attempt_killed_after_its_notice_lost_nothing_if_its_last_step_was_saved(
    tmp_path, last_step, outcome
):
    """Killed while it evaluated after its final save: preempted, not 'unsaved'."""
    _running(tmp_path, time.time() - 60, last_step=last_step, saved_step=40, notice_step=40)
    led = ledger_lib.Ledger(str(tmp_path), True)
    led.begin(40)
    closed = led.records[0]
    assert closed["outcome"] == outcome and closed["steps_lost"] == last_step - 40, closed
