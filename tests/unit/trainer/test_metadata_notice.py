"""GCE's metadata preemption notice (spottrain/trainer/metadata_notice.py).

The in-process tests; those that start processes are in
tests/integration/trainer/test_metadata_notice.py.
"""

from __future__ import annotations

import pytest
from ports import held_port
from real_kube import wait_for

from spottrain.trainer import metadata_notice


def watcher(host: str, heard: list) -> metadata_notice.Watcher:
    return metadata_notice.Watcher(heard.append, metadata_notice.url(host)).start()


def test_the_key_turning_true_is_one_notice(metadata):
    md, heard = metadata(), []
    w = watcher(md.host, heard)
    wait_for("a waiting request", lambda: any("wait_for_change=true" in p for _, p in md.requests))
    assert heard == []
    md.preempt()
    wait_for("the notice", lambda: heard, timeout=30)
    w.thread.join(10)
    assert heard == [metadata_notice.REASON] and w.noticed and not w.thread.is_alive()
    waits = [p for _, p in md.requests if "wait_for_change=true" in p]
    assert "last_etag=etag-FALSE" in waits[0]  # no change between two requests is missed


def test_a_key_already_true_is_a_notice_at_once(metadata):
    md, heard = metadata(preempted=True), []
    watcher(md.host, heard).thread.join(10)
    assert heard == [metadata_notice.REASON]
    assert len(md.requests) == 1 and "wait_for_change" not in md.requests[0][1]


@pytest.mark.parametrize("where", ["nothing listens", "not GCE's server"])
def test_off_gce_the_watcher_ends_silently(metadata, where):
    heard = []
    with held_port() as closed:  # held: no other process can listen there meanwhile
        host = f"127.0.0.1:{closed}" if where == "nothing listens" else metadata(flavor=False).host
        w = watcher(host, heard)
        w.thread.join(10)
    assert not w.thread.is_alive() and heard == []


def test_a_dropped_connection_is_retried(metadata, monkeypatch):
    monkeypatch.setattr(metadata_notice, "RETRY_SECONDS", 0.1)
    md, heard = metadata(drop_first_wait=True), []
    w = watcher(md.host, heard)
    wait_for("the retried wait", lambda: len(md.requests) >= 3, timeout=30)
    md.preempt()
    wait_for("the notice", lambda: heard, timeout=30)
    w.thread.join(10)
    assert heard == [metadata_notice.REASON]
