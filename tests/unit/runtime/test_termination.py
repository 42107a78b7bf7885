"""The fatal and retryable marks our components leave in the kubelet's termination-message file."""

from __future__ import annotations

import pytest

from spottrain import exits
from spottrain.runtime import termination


@pytest.fixture
def log_file(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    monkeypatch.setenv(termination.PATH_ENV, str(path))
    return path


@pytest.mark.parametrize("code", sorted(exits.FATAL))
def test_a_fatal_exit_is_marked_where_the_kubelet_created_the_file(log_file, code):
    log_file.write_text("left by an earlier write")
    assert termination.mark_exit(code, "--batch-size-per-replica 0: must be >= 1")
    assert log_file.read_text() == (
        f"spottrain fatal exit {code}: --batch-size-per-replica 0: must be >= 1"
    )


@pytest.mark.parametrize("code", sorted(exits.RETRYABLE))
def test_a_retryable_exit_is_marked_too(log_file, code):
    # Through KFP's launcher it exits 1: the mark is how Argo tells it from a crash.
    log_file.touch()
    assert termination.mark_exit(code, "trainer exited: retryable")
    assert log_file.read_text() == f"spottrain retryable exit {code}: trainer exited: retryable"


@pytest.mark.parametrize("code", [0, 1, 2, 137])
def test_other_exits_leave_no_mark(log_file, code):
    log_file.touch()
    assert not termination.mark_exit(code, "x")
    assert log_file.read_text() == ""


def test_outside_a_pod_nothing_is_created(log_file):
    assert not termination.mark_exit(exits.FATAL_CONFIG, "x")
    assert not log_file.exists()


def test_the_mark_fits_the_kubelets_4096_bytes(log_file):
    log_file.touch()
    termination.mark_exit(exits.FATAL_NAN, "é" * 5000)
    assert len(log_file.read_bytes()) <= termination.MAX_BYTES


@pytest.mark.parametrize(
    ("code", "line", "mark"),
    [
        (
            exits.FATAL_CONFIG,
            "--batch-size-per-replica 0: must be >= 1",
            "spottrain fatal exit",
        ),
        # A save on GCE's metadata notice exits 143 with no SIGTERM: KFP's launcher makes it 1.
        (
            exits.PREEMPTED,
            f"trainer exited 143: {exits.describe(exits.PREEMPTED)}",
            "spottrain retryable exit",
        ),
    ],
    ids=["fatal", "notice"],
)
def test_the_in_pod_train_component_marks_the_trainers_exit(
    log_file, tmp_path, monkeypatch, code, line, mark
):
    from types import SimpleNamespace

    from spottrain.runtime import train as in_pod
    from spottrain.runtime.train_settings import TrainSettings

    log_file.touch()

    def trainer_ends(**_):
        raise in_pod.TrainFailed(code, line)

    monkeypatch.setattr(in_pod, "train", trainer_ends)
    artifact = SimpleNamespace(path=str(tmp_path / "m"), metadata={})
    with pytest.raises(SystemExit) as done:
        in_pod.run_component(data=SimpleNamespace(path=str(tmp_path), metadata={}),
                             model=artifact, metrics=None, checkpoint_dir=str(tmp_path / "c"),
                             settings=TrainSettings())  # fmt: skip
    assert done.value.code == code
    assert log_file.read_text() == f"{mark} {code}: {line}"


@pytest.mark.parametrize("src", ["ftp://bucket/x", "missing"])
def test_the_copy_component_refuses_bad_input_in_one_line_exit_64_marked(
    log_file, tmp_path, caplog, src
):
    import logging
    from types import SimpleNamespace

    from spottrain.runtime import gcs_copy as copy_rt

    log_file.touch()
    copied = SimpleNamespace(path=str(tmp_path / "out"), metadata={})
    src = src if "://" in src else str(tmp_path / src)
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as done:
        copy_rt.run_component(copied=copied, src=src, dst="")
    assert done.value.code == exits.FATAL_CONFIG
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert log_file.read_text() == f"{termination.FATAL_MARK} 64: {errors[0]}"


def test_a_copy_that_may_pass_on_a_retry_exits_retryable():
    from spottrain.copier import EXIT_FAILED, EXIT_USAGE
    from spottrain.runtime import gcs_copy as copy_rt

    assert copy_rt.component_exit(EXIT_USAGE) == exits.FATAL_CONFIG
    assert copy_rt.component_exit(EXIT_FAILED) == exits.UNAVAILABLE
    assert exits.is_retryable(copy_rt.component_exit(69))
