"""A KerasTask's fit() inputs get the engine's contract on two workers (issue 54).

Arrays with --epochs (refused before: "--epochs needs a task that knows its number of
examples"), a keras.utils.PyDataset with fit's epochs and no length flag, and a Python
generator: two workers, SIGTERM mid-epoch, a retry, the exact final step and weights
bit-identical to an uninterrupted run's. And --check says what the run will do with
--epochs: the same length, or the same one-line refusal.
"""

from __future__ import annotations

import fit_input_tasks
import numpy as np
import pytest
import tfds_digits
from keras_io.harness import exported_weights
from trainer_helpers import error_lines, ledger, run_module, summary

from spottrain import exits
from spottrain.trainer import launch

# task, its flags, the final step it must reach (epochs x steps an epoch), the step to stop at
CASES = {
    "arrays-epochs": ("Arrays", ["--epochs", "3"], 3 * 12, 15),
    "pydataset": ("PyData", [], 4 * 10, 17),
    "generator": ("Generator", [], 3 * 10, 13),
    # stopped in its third epoch: the retry reads only that epoch's batches before its step
    "dataset": ("Data", [], 4 * 12, 29),
    # from_tensor_slices: the retry reads nothing before its step (issue 55)
    "slices": ("Slices", [], 4 * 12, 29),
    # files and tfds: streams whose maps (parse, decode) run on each worker's share
    "records": ("Records", [], 4 * 12, 29),
    "tfds": ("Tfds", [], 2 * 25, 33),
}


@pytest.fixture(autouse=True)
def _file_data(tmp_path, monkeypatch, request):
    """The files the Records and Tfds tasks read, made before the workers start."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    task = params.get("task") or CASES.get(params.get("case"), ("",))[0]
    folder = tmp_path / "data"
    if task == "Records":
        folder.mkdir()
        fit_input_tasks.write_records(str(folder))
    elif task == "Tfds":
        tfds_digits.DigitsSklearn(data_dir=str(folder)).download_and_prepare()
    monkeypatch.setenv(fit_input_tasks.DATA_ENV, str(folder))


def _args(name: str, out, flags: list[str]) -> list[str]:
    return [
        "--task", f"tests.fit_input_tasks:{name}", *flags, "--deterministic",
        "--save-every-steps", "1000", "--threads", "1", "--log-every-steps", "5",
        "--checkpoint-dir", str(out / "checkpoints"), "--model-dir", str(out / "model"),
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_fit_inputs_resume_on_two_workers_bit_identical(tmp_path, case):
    name, flags, final, stop_at = CASES[case]
    args = _args(name, tmp_path / "hit", flags)
    first = launch.ProcessLauncher(
        2, args, preempt_at_step=stop_at, signal_name="TERM", seed=0
    ).run()
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, first
    rec = ledger(tmp_path / "hit")[0]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
    assert 0 < rec["saved_step"] < final, rec
    assert launch.ProcessLauncher(2, args).run().code == 0
    assert ledger(tmp_path / "hit")[1]["start_step"] == rec["saved_step"]
    s = summary(tmp_path / "hit")
    assert s["final_step"] == s["train_steps"] == final and s["num_workers"] == 2, s
    clean = _args(name, tmp_path / "clean", flags)
    assert launch.ProcessLauncher(2, clean).run().code == 0
    hit = exported_weights(tmp_path / "hit/model")
    whole = exported_weights(tmp_path / "clean/model")
    assert hit.keys() == whole.keys() and hit
    for key in hit:
        np.testing.assert_array_equal(hit[key], whole[key], err_msg=key)


@pytest.mark.slow
def test_check_and_the_run_agree_on_epochs(tmp_path):
    """--check --epochs 6 says the run's length for arrays, and the run's refusal for a
    dataset of no length (before: check ok, then the run refused)."""
    check = ["--check", "--task", "tests.fit_input_tasks:Arrays", "--epochs", "6"]
    proc, _ = run_module("spottrain.trainer.task", check)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "72 steps (12 an epoch)" in proc.stdout.strip().splitlines()[-1]

    stream = ["--task", "tests.fit_input_tasks:Stream", "--epochs", "6", "--threads", "1"]
    checked, _ = run_module("spottrain.trainer.task", ["--check", *stream])
    out = tmp_path / "run"
    where = ["--checkpoint-dir", str(out / "c"), "--model-dir", str(out / "m")]
    ran, _ = run_module("spottrain.trainer.task", [*stream, *where])
    said = "--epochs 6: Stream.fit()'s dataset has no length"
    for proc in (checked, ran):
        assert proc.returncode == exits.FATAL_CONFIG, proc.stderr[-3000:]
        lines = error_lines(proc)
        assert len(lines) == 1 and said in lines[0], lines


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, flags",
    [("Arrays", ["--epochs", "6"]), ("Slices", []), ("Records", []), ("Tfds", [])],
)
def test_a_gang_of_another_size_resumes_the_same_run(tmp_path, task, flags):
    """2 workers stopped at step 30, resumed on 4 (issue 55): bit-identical to 2 workers
    that stopped cleanly at the same step and went on on 4, so the notice and the change
    of gang lose nothing. The same batches (each worker its share of the same global
    batch), so the weights differ from 2 workers' uninterrupted run only as 4 workers'
    uninterrupted run does: by the all-reduce summing in another order (float32
    rounding, not data; measured 6e-8 either way)."""
    dirs = ("moved", "resized", "two", "four")
    args = {d: _args(task, tmp_path / d, flags) for d in dirs}
    first = launch.ProcessLauncher(
        2, args["moved"], preempt_at_step=30, signal_name="TERM", seed=0
    ).run()
    assert set(first.worker_codes.values()) == {exits.PREEMPTED}, first
    assert launch.ProcessLauncher(4, args["moved"]).run().code == 0
    saved = ledger(tmp_path / "moved")[0]["saved_step"]
    assert ledger(tmp_path / "moved")[1]["start_step"] == saved > 0
    assert summary(tmp_path / "moved")["num_workers"] == 4
    until = _args(task, tmp_path / "resized", ["--train-steps", str(saved)])
    assert launch.ProcessLauncher(2, until).run().code == 0
    for gang, name in ((4, "resized"), (2, "two"), (4, "four")):
        assert launch.ProcessLauncher(gang, args[name]).run().code == 0
    assert ledger(tmp_path / "resized")[1]["start_step"] == saved
    moved, resized, two, four = (exported_weights(tmp_path / d / "model") for d in dirs)
    assert moved.keys() == resized.keys() == two.keys() == four.keys() and moved
    for key in moved:
        assert np.array_equal(moved[key], resized[key]), key
    for key in two:
        rounding = np.max(np.abs(four[key] - two[key]))
        assert np.max(np.abs(moved[key] - two[key])) <= max(4 * rounding, 1e-6), key
