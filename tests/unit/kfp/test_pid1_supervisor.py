"""``python -m spottrain.trainer.task``'s supervisor as a container's main process (PID 1),
fast.

The in-process tests; those that start processes are in
tests/system/kfp/test_pid1_supervisor.py.
"""

from __future__ import annotations

import os
import signal
import sys

from spottrain import exits
from spottrain.trainer import watchdog


def test_a_notice_before_the_trainer_starts_is_held_not_dropped(tmp_path):
    """PID 1 drops unhandled signals: the relay holds it, and no trainer is started."""
    marker = tmp_path / "started"
    before = signal.getsignal(signal.SIGTERM)  # an in-process trainer test may have set one
    relay = watchdog.NoticeRelay().install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # handled at once (main thread)
        assert relay.held == signal.SIGTERM
    finally:
        relay.restore()
    cmd = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    code = watchdog.Supervisor(cmd, 60, 60).run(relay)
    assert code == exits.PREEMPTED and not marker.exists()
    assert signal.getsignal(signal.SIGTERM) is before  # restored
