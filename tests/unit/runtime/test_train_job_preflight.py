"""The JobSet launcher refuses what its pods would refuse, before any API call (issue 42, 4).

A run started from the KFP UI skips run-gke's pre-flight: the launcher created the
JobSet, and every pod then exited 64 on its flags (or ``workers=100001`` was a
ValueError traceback, exit 1, retried). The component checks the exact flags its
pods get with the trainer's own parser, first, so the two cannot disagree.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from ended_launcher import ended

from spottrain import exits
from spottrain.runtime import train as in_pod
from spottrain.runtime.train_job import component, launcher
from spottrain.runtime.train_job.inputs import InputError, RunInputs
from spottrain.runtime.train_settings import TrainSettings
from spottrain.trainer import config

BASE = dict(
    run_id="run-9", task_name="train-job", workers=2, pool="spot", gpu_type="nvidia-tesla-t4",
    gpus=1, memory_limit="48G", retries=5, unschedulable_timeout=300, on_demand=True,
    deadline="3600s", settings=TrainSettings(train_steps=20, backbone="small_cnn", weights="none"),
)  # fmt: skip
GS = dict(data_dir="gs://my-bucket/data", checkpoint_dir="gs://my-bucket/ckpt")


class NoApi:
    """A cluster that must not be called: any API call fails the test."""

    namespace = "ns"

    def __getattr__(self, name):
        raise AssertionError(f"the component called the API ({name}) before refusing")


def artifact(path, uri=""):
    return SimpleNamespace(path=str(path), metadata={}, uri=uri)


def _settings(**change) -> TrainSettings:
    return TrainSettings(**{**BASE["settings"].inputs(), **change})


@pytest.mark.parametrize(
    "change, message",
    [
        ({"workers": 100001}, "workers=100001: expected 1 to 100000"),
        ({"settings": _settings(steps_per_loop="0")},
         "steps_per_loop: '0' must be auto or a whole number"),
        ({"settings": _settings(jit_compile="maybe")}, "jit_compile: invalid choice: 'maybe'"),
        ({"settings": _settings(task_args="{bad")}, "task_args '{bad' is not JSON"),
        ({"settings": _settings(task_args="[1]")}, "must be a JSON object"),
        ({"settings": _settings(learning_rate=float("nan"))}, "learning_rate nan must be in"),
        ({"settings": _settings(batch_size_per_replica=0)}, "batch_size_per_replica 0"),
        ({"settings": _settings(backbone="vgg")}, "'vgg'"),
        ({"extra_args": ["--bogus-flag"]}, "--bogus-flag"),
    ],
)  # fmt: skip
def test_settings_the_pods_would_refuse_are_one_line_before_any_api_call(change, message):
    with pytest.raises((InputError, in_pod.TrainFailed)) as err:
        component.launch(NoApi(), RunInputs(**{**BASE, **GS, **change}))
    assert err.value.code == exits.FATAL_CONFIG
    text = str(err.value)
    assert message in text and "\n" not in text, text


def test_the_check_parses_exactly_the_flags_the_pods_get(monkeypatch):
    parsed: list = []
    real = config.parse_args

    def recording(argv, env_dirs):
        parsed.append(list(argv))
        return real(argv, env_dirs)

    monkeypatch.setattr(config, "parse_args", recording)
    monkeypatch.delenv("HOSTNAME", raising=False)  # no own pod to read
    seen: list = []
    monkeypatch.setattr(
        launcher, "JobSetLauncher", ended(launcher.Outcome(1, "stop here", "st-x"), seen)
    )
    component.launch(NoApi(), RunInputs(**{**BASE, **GS, "extra_args": ["--seed", "7"]}))
    [(sets, _)] = seen
    assert parsed == [list(ws.args) for ws in sets[:1]]
    assert all(ws.args == sets[0].args for ws in sets)


def test_the_component_exits_64_with_the_one_line(tmp_path, caplog):
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as done:
        component.run_component(
            data=artifact(tmp_path / "d", uri="gs://my-bucket/data"),
            model=artifact(tmp_path / "m"), metrics=None, attempts=artifact(tmp_path / "a"),
            k=NoApi(), checkpoint_dir="gs://my-bucket/ckpt",
            **{**BASE, "settings": _settings(jit_compile="maybe")},
        )  # fmt: skip
    assert done.value.code == exits.FATAL_CONFIG
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "jit_compile: invalid choice: 'maybe'" in line
