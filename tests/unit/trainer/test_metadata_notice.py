"""GCE's metadata preemption notice (spottrain/trainer/metadata_notice.py).

The in-process tests; those that start processes are in
tests/integration/trainer/test_metadata_notice.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from itertools import pairwise

import pytest
from ports import held_port
from real_kube import wait_for

from spottrain.trainer import metadata_notice


def watcher(host: str, heard: list) -> metadata_notice.Watcher:
    return metadata_notice.Watcher(heard.append, host).start()


def waiting(md) -> bool:
    return any("wait_for_change=true" in p for _, p in md.requests)


def alive(w: metadata_notice.Watcher) -> bool:
    return w.thread.is_alive()


def test_the_key_turning_true_is_one_notice(metadata):
    md, heard = metadata(), []
    w = watcher(md.host, heard)
    wait_for("a waiting request", lambda: waiting(md))
    assert heard == []
    md.preempt()
    wait_for("the notice", lambda: heard, timeout=30)
    waits = [p for _, p in md.requests if "wait_for_change=true" in p]
    assert "last_etag=etag-FALSE" in waits[0]  # no change between two requests is missed
    # It goes on watching (to say a revert), and hears no second notice.
    wait_for("a wait past TRUE", lambda: any("last_etag=etag-TRUE" in p for _, p in md.requests))
    assert heard == [metadata_notice.REASON] and w.noticed and alive(w)
    w.stop()


def test_a_key_already_true_is_a_notice_at_once(metadata):
    md, heard = metadata(preempted=True), []
    w = watcher(md.host, heard)
    wait_for("the notice", lambda: heard, timeout=30)
    assert heard == [metadata_notice.REASON]
    assert "wait_for_change" not in md.requests[0][1]
    w.stop()


def test_a_dropped_connection_is_retried(metadata, monkeypatch):
    monkeypatch.setattr(metadata_notice, "RETRY_FIRST_SECONDS", 0.1)
    md, heard = metadata(drop_first_wait=True), []
    w = watcher(md.host, heard)
    wait_for("the retried wait", lambda: len(md.requests) >= 3, timeout=30)
    md.preempt()
    wait_for("the notice", lambda: heard, timeout=30)
    assert heard == [metadata_notice.REASON]
    w.stop()


# -- start-up faults: retried, never the end of the watcher ------------------------


@pytest.mark.parametrize("failure", ["503", "reset", "garbage", "not a value"])
def test_failed_first_reads_are_retried_and_the_notice_still_heard(metadata, monkeypatch, failure):
    monkeypatch.setattr(metadata_notice, "RETRY_FIRST_SECONDS", 0.05)
    md, heard = metadata(fail_first=3, failure=failure), []
    w = watcher(md.host, heard)
    # Past the failures, the watcher waits on the key; only then the notice comes.
    wait_for("a waiting request, or the watcher's end", lambda: waiting(md) or not alive(w))
    assert alive(w) and heard == []
    md.preempt()
    wait_for("the notice", lambda: heard, timeout=30)
    assert heard == [metadata_notice.REASON]
    # Backed off: each retry waited at least its delay after the failure before it.
    times = [t for t, _ in md.requests[:4]]
    for n, (a, b) in enumerate(pairwise(times), 1):
        assert b - a >= metadata_notice.retry_delay(n) * 0.99, (n, b - a)


def test_the_retry_delay_doubles_up_to_a_small_bound():
    delays = [metadata_notice.retry_delay(n) for n in range(1, 10)]
    assert delays[0] == metadata_notice.RETRY_FIRST_SECONDS
    assert all(b == min(2 * a, metadata_notice.RETRY_MAX_SECONDS) for a, b in pairwise(delays))
    assert delays[-1] == metadata_notice.RETRY_MAX_SECONDS <= 10


# -- what it says: one INFO line on whether it watches, and why it stopped ----------

LOGGER = "spottrain.trainer.metadata_notice"


def said(caplog, host: str, level=logging.INFO) -> list[str]:
    """This watcher's lines (a watcher of an earlier test may still be retrying)."""
    lines = [r for r in caplog.records if r.name == LOGGER and r.levelno >= level]
    return [r.getMessage() for r in lines if host in r.getMessage()]


def test_it_says_once_that_it_watches(metadata, caplog):
    caplog.set_level(logging.INFO, LOGGER)
    md, heard = metadata(), []
    w = watcher(md.host, heard)
    wait_for("two waits", lambda: sum("wait_for_change" in p for _, p in md.requests) >= 1)
    md.preempt()
    wait_for("the notice", lambda: heard, timeout=30)
    lines = said(caplog, md.host)
    active = [ln for ln in lines if "watching" in ln]
    assert len(active) == 1 and md.host in active[0] and "FALSE" in active[0], lines
    assert not any("retrying" in ln or "notice off" in ln for ln in lines), lines
    w.stop()


@pytest.mark.parametrize(
    "where, why",
    [
        ("nothing listens", "connection refused"),
        ("no such name", "does not resolve"),
        ("not GCE's server", "Metadata-Flavor"),
    ],
)
def test_off_gce_it_says_it_is_off_and_why(metadata, caplog, where, why):
    caplog.set_level(logging.INFO, LOGGER)
    with contextlib.ExitStack() as stack:
        host = {
            # held: no other process can listen there meanwhile
            "nothing listens": lambda: f"127.0.0.1:{stack.enter_context(held_port())}",
            "no such name": lambda: "metadata.spottrain.invalid",  # RFC 2606: never resolves
            "not GCE's server": lambda: metadata(flavor=False).host,
        }[where]()
        w = watcher(host, [])
        w.thread.join(30)
    assert not alive(w)
    lines = said(caplog, host)
    assert len(lines) == 1 and " off" in lines[0] and why in lines[0] and host in lines[0], lines


def test_a_failing_start_says_it_retries_once_then_that_it_watches(metadata, caplog, monkeypatch):
    monkeypatch.setattr(metadata_notice, "RETRY_FIRST_SECONDS", 0.05)
    caplog.set_level(logging.INFO, LOGGER)
    md = metadata(fail_first=3, failure="503")
    w = watcher(md.host, [])
    wait_for("a waiting request, or the watcher's end", lambda: waiting(md) or not alive(w))
    wait_for("the active line", lambda: any("watching" in ln for ln in said(caplog, md.host)))
    lines = said(caplog, md.host)
    assert len(lines) == 2, lines  # the two later failures only at DEBUG
    assert "503" in lines[0] and "retrying" in lines[0], lines
    assert "watching" in lines[1] and "after 3 failed reads" in lines[1], lines
    w.stop()


# -- GCE_METADATA_HOST that is not a host: one WARNING naming it, no traceback ------


@pytest.mark.parametrize("value", ["not a host", "127.0.0.1:abc", "127.0.0.1:99999", "a/b"])
def test_a_bad_metadata_host_is_one_warning_and_the_watcher_off(caplog, monkeypatch, value):
    caplog.set_level(logging.INFO, LOGGER)
    crashed = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    monkeypatch.setenv(metadata_notice.HOST_ENV, value)
    w = metadata_notice.watch([].append)
    w.thread.join(10) if w.thread.ident else None
    assert crashed == [] and not alive(w)
    lines = said(caplog, value)
    assert len(lines) == 1 and repr(value) in lines[0] and metadata_notice.HOST_ENV in lines[0]
    assert caplog.records[-1].levelno == logging.WARNING and "SIGTERM" in lines[0], lines


# -- a TRUE that reverts: still a notice, and the lines say when and that it reverted --


def test_a_true_that_reverts_still_stops_and_the_lines_say_so(metadata, caplog):
    caplog.set_level(logging.INFO, LOGGER)
    md, heard = metadata(), []
    w = watcher(md.host, heard)
    wait_for("a waiting request", lambda: waiting(md))
    flipped = md.preempt()
    wait_for("the notice", lambda: heard, timeout=30)
    reverted = md.revert()
    wait_for("the revert line", lambda: any("FALSE again" in ln for ln in said(caplog, md.host)))
    w.thread.join(10)
    assert heard == [metadata_notice.REASON] and not alive(w)  # the notice stands
    warned = said(caplog, md.host, logging.WARNING)
    assert len(warned) == 2, warned
    seen = metadata_notice.utc(w.seen_at)
    assert flipped <= w.seen_at and seen in warned[0] and "the notice" in warned[0]
    assert reverted <= w.reverted_at and metadata_notice.utc(w.reverted_at) in warned[1]
    assert seen in warned[1] and "still" in warned[1], warned
