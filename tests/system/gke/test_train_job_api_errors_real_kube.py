"""The JobSet launcher when its path to the API server fails, on the wire.

The cluster is real (kube-cp with JobSet's controller, as in
tests/system/gke/test_train_job_launcher_real_kube.py), and so are the client and the
launcher: its requests go through a TCP proxy (tests/wire_faults.py) that refuses
connections, resets them, accepts them and never answers, or answers late, while the
gang runs on (tests/launcher_outages.py). Each table runs its scenarios at once, one
namespace each, so the table costs about as long as its longest row.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from launcher_outages import play
from real_jobset import MARKS, jobset_kube_fixture  # noqa: F401 - the fixture, by import
from wire_faults import BLACKHOLE, KINDS, REFUSE, RESET, SLOW

from spottrain import exits

pytestmark = MARKS

OUTAGE = 5.0  # seconds; more than the read timeout (2 s), so black holes time out
PATIENCE = 60.0  # what the launcher waits out, per call


def _table(cp, rows, **kw):
    with ThreadPoolExecutor(len(rows)) as pool:
        futures = [
            pool.submit(play, cp, f"to-{tag}", f"st-{tag}", kind, phase, seconds, **kw)
            for tag, kind, phase, seconds in rows
        ]
        return [f.result() for f in futures]


def test_outages_shorter_than_the_patience_are_waited_out_at_start_and_mid_run(jobset_kube):
    rows = [(f"{k}-{p}", k, p, OUTAGE) for k in KINDS for p in ("start", "mid")]
    played = _table(jobset_kube, rows, patience=PATIENCE)
    for run in played:
        where = f"{run.kind} at {run.phase}: {run.line} {run.lines}"
        assert run.code == 0 and run.line == "JobSet Completed", where
        assert run.same_gang and run.restarts == 0, where  # the gang was never touched
        if run.kind != SLOW:  # a slow answer within the read timeout is an answer
            assert run.retried == 1 and run.answered_again, where  # one line each way
        # and none of urllib3's (3 "Retrying" per try, 57 lines in 90 s, before kube.api_client)
        assert run.urllib3 == [], (where, run.urllib3[:3])


def test_an_outage_that_outlasts_the_patience_is_one_line_172_and_the_gang_left(jobset_kube):
    rows = [(f"down-{k}", k, "mid", None) for k in KINDS]
    rows.append(("down-refuse-start", REFUSE, "start", None))
    # Answers later than the read timeout are no answers.
    played = _table(jobset_kube, rows, patience=6.0, delay=3.0)
    for run in played:
        where = f"{run.kind} at {run.phase}: {run.line}"
        assert run.code == exits.UNAVAILABLE, where
        assert "\n" not in run.line and "giving up" in run.line, where
        assert run.kept == (run.phase == "mid") and run.same_gang == (run.phase == "mid"), where
    lines = {run.kind: run.line for run in played if run.phase == "mid"}
    assert "ConnectionRefusedError" in lines[REFUSE] or "refused" in lines[REFUSE], lines
    assert "reset" in lines[RESET].lower() or "aborted" in lines[RESET].lower(), lines
    assert "timed out" in lines[BLACKHOLE].lower() or "timeout" in lines[BLACKHOLE], lines
