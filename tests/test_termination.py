"""The fatal mark our components leave in the kubelet's termination-message file."""

from __future__ import annotations

import pytest

from spottrain.runtime import termination
from spottrain.trainer import preemption


@pytest.fixture
def log_file(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    monkeypatch.setenv(termination.PATH_ENV, str(path))
    return path


@pytest.mark.parametrize("code", sorted(preemption.FATAL))
def test_a_fatal_exit_is_marked_where_the_kubelet_created_the_file(log_file, code):
    log_file.write_text("left by an earlier write")
    assert termination.mark_fatal(code, "--batch-size-per-replica 0: must be >= 1")
    assert log_file.read_text() == (
        f"spottrain fatal exit {code}: --batch-size-per-replica 0: must be >= 1"
    )


@pytest.mark.parametrize("code", [0, 1, preemption.PREEMPTED, preemption.PEER_LOST])
def test_other_exits_leave_no_mark(log_file, code):
    log_file.touch()
    assert not termination.mark_fatal(code, "x")
    assert log_file.read_text() == ""


def test_outside_a_pod_nothing_is_created(log_file):
    assert not termination.mark_fatal(preemption.FATAL_CONFIG, "x")
    assert not log_file.exists()


def test_the_mark_fits_the_kubelets_4096_bytes(log_file):
    log_file.touch()
    termination.mark_fatal(preemption.FATAL_NAN, "é" * 5000)
    assert len(log_file.read_bytes()) <= termination.MAX_BYTES


def test_the_in_pod_train_component_marks_the_trainers_fatal_exit(log_file, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from spottrain.runtime import train as in_pod

    log_file.touch()
    line = "--batch-size-per-replica 0: must be >= 1"

    def trainer_refuses(**_):
        raise in_pod.TrainFailed(preemption.FATAL_CONFIG, line)

    monkeypatch.setattr(in_pod, "train", trainer_refuses)
    artifact = SimpleNamespace(path=str(tmp_path / "m"), metadata={})
    with pytest.raises(SystemExit) as done:
        in_pod.run_component(data=SimpleNamespace(path=str(tmp_path), metadata={}),
                             model=artifact, metrics=None)  # fmt: skip
    assert done.value.code == preemption.FATAL_CONFIG
    assert log_file.read_text() == f"{termination.FATAL_MARK} 64: {line}"
