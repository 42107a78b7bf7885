"""The small pieces the platform reproductions rely on, each alone (fast).

The in-process tests; those that start processes are in
tests/system/kfp/test_platform_units.py.
"""

from __future__ import annotations

import signal

from spottrain import ledger as ledger_lib


def test_ledger_classifies_an_attempt_killed_after_its_notice(tmp_path):
    ckpt = str(tmp_path)
    first = ledger_lib.Ledger(ckpt, True)
    first.begin(0)
    first.progress(40, saved_step=40)
    first.notice(57, signal.Signals.SIGTERM.name)  # then the platform killed it
    second = ledger_lib.Ledger(ckpt, True)
    second.begin(40)
    prev = second.records[0]
    assert prev["outcome"] == "preempted_unsaved" and prev["steps_lost"] == 17
    assert ledger_lib.totals(second.records)["preemptions"] == 1
    third = ledger_lib.Ledger(ckpt, True)
    third.begin(40)  # the second attempt died without a notice
    assert third.records[1]["outcome"] == "killed"
