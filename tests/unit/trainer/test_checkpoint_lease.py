"""One writer per checkpoint dir: the lease (spottrain/trainer/lease.py), local and gs://.

The in-process tests; those that start processes are in
tests/integration/trainer/test_checkpoint_lease.py.
"""

from __future__ import annotations

import time

import pytest

from spottrain import exits
from spottrain import ledger as ledger_lib
from spottrain.trainer import lease as lease_lib


def test_a_bad_config_beside_a_live_run_adds_its_record_and_leaves_the_others(tmp_path):
    """The supervisor's fast fatal path writes without the lease: it must not close the
    holder's running record as killed."""
    ckpt = str(tmp_path / "ckpt")
    holder = ledger_lib.Ledger(ckpt, True, min_interval_s=0)
    holder.begin(0)
    holder.progress(7)
    ledger_lib.Ledger(ckpt, True).end(exits.FATAL_CONFIG, "--epochs inf")
    running, fatal = ledger_lib.read(ckpt)
    assert running["outcome"] == "running" and running["last_step"] == 7
    assert fatal["exit_code"] == 64 and fatal["message"] == "--epochs inf"


def test_a_folder_in_the_records_place_is_named_and_fatal(tmp_path):
    """The lease cannot be written there: one line naming lease.json (not the temporary
    file beside it), fatal, not a retryable outage."""
    from spottrain import fileio
    from spottrain.trainer import checkpointing, config, distribution

    (tmp_path / "ck" / "lease.json").mkdir(parents=True)
    cfg = config.TrainConfig(checkpoint_dir=str(tmp_path / "ck"), lease_seconds=4)
    chief = distribution.Cluster(task_type="", task_id=0, num_workers=1, is_chief=True)
    with pytest.raises(OSError) as raised:
        checkpointing.acquire_lease(cfg, chief)
    ended = fileio.storage_failure(raised.value, {"--checkpoint-dir": cfg.checkpoint_dir})
    assert isinstance(ended, exits.Unwritable) and ended.code == exits.FATAL_CONFIG
    assert f"{tmp_path / 'ck' / 'lease.json'}' (--checkpoint-dir)" in str(ended), ended
    assert ".tmp" not in str(ended)
    assert (tmp_path / "ck" / "lease.json").is_dir()  # nothing of the user's was moved


def test_a_lease_of_any_allowed_length_renews(tmp_path):
    """The longest lease --lease-seconds allows still renews (1e12 s killed the
    renewal thread with an OverflowError; test_bad_inputs_trainer refuses it)."""
    longest = lease_lib.Lease(str(tmp_path / "ck"), "run-a", seconds=lease_lib.MAX_SECONDS)
    longest.acquire(wait_seconds=0)
    longest.start_renewing()
    time.sleep(0.5)
    assert longest._thread.is_alive()
    longest.release()
