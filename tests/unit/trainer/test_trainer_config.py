"""Bad configs fail fast, before any strategy, with one line naming the value (exit 64).

The in-process tests; those that start processes are in
tests/integration/trainer/test_trainer_config.py.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from trainer_helpers import tiny_args

from spottrain import exits
from spottrain.trainer import attempt, distribution

TWO_WORKERS = json.dumps(
    {
        "cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
        "task": {"type": "worker", "index": 0},
    }
)


def _one_class_dir(tmp_path):
    (tmp_path / "only" / "a").mkdir(parents=True)
    (tmp_path / "only" / "a" / "x.png").write_bytes(b"not really a png")
    return str(tmp_path / "only")


# (overrides, text the error must name, extra environ)
BAD = {
    "unknown backbone": ({"backbone": "resnet5"}, "'resnet5'", {}),
    "missing image dir": ({"image-dir": "/nonexistent/images"}, "/nonexistent/images", {}),
    "one class": ({"image-dir": "ONE_CLASS"}, "1 class folder", {}),
    "unknown tfds dataset": (
        {"image-dir": "", "dataset": "no_such_dataset_xyz"},
        "'no_such_dataset_xyz'",
        {},
    ),
    "tfds not prepared": (
        {"image-dir": "", "dataset": "mnist", "data-dir": "EMPTY"},
        "not prepared",
        {},
    ),
    "batch not divisible": (
        {"global-batch-size": 33},
        "--global-batch-size 33",
        {"TF_CONFIG": TWO_WORKERS},
    ),
    "zero steps": ({"train-steps": 0}, "--train-steps (0)", {}),
    "negative learning rate": ({"learning-rate": -0.1}, "--learning-rate -0.1", {}),
    "unknown optimizer": (
        {"optimizer": "lamb"},
        "--optimizer 'lamb' is unknown; choose one of adam, sgd, rmsprop, adamw",
        {},
    ),
    "imagenet on small_cnn": ({"weights": "imagenet"}, "--weights imagenet", {}),
    "image too small": ({"backbone": "resnet50", "image-size": 16}, "--image-size 16", {}),
    "keep one checkpoint": ({"keep-checkpoints": 1}, "--keep-checkpoints 1", {}),
    "not a number": ({"save-every-steps": "often"}, "'often'", {}),
    "bad TF_CONFIG": ({}, "TF_CONFIG", {"TF_CONFIG": "{not json"}),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_config_is_fatal_fast_and_named(name, digits_dir, tmp_path, caplog):
    overrides, expected, environ = BAD[name]
    overrides = dict(overrides)
    if overrides.get("image-dir") == "ONE_CLASS":
        overrides["image-dir"] = _one_class_dir(tmp_path)
    if overrides.get("data-dir") == "EMPTY":
        (tmp_path / "tfds").mkdir()
        overrides["data-dir"] = str(tmp_path / "tfds")
    if overrides.get("image-dir") == "":
        overrides["image-dir"] = None
    argv = tiny_args(digits_dir, tmp_path / "out", **overrides)
    caplog.set_level(logging.INFO)
    start = time.monotonic()
    code = attempt.run(argv, environ=environ)
    elapsed = time.monotonic() - start
    assert code == exits.FATAL_CONFIG
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "\n" not in errors[0]
    assert expected in errors[0]
    assert elapsed < 20, f"took {elapsed:.1f} s to reject"
    assert not any("strategy" in r.getMessage() for r in caplog.records), "built a strategy"


def test_fatal_marker_makes_retries_exit_at_once(digits_dir, tmp_path, caplog):
    out = tmp_path / "out"
    argv = tiny_args(digits_dir, out, image_dir="/nonexistent/again")
    assert attempt.run(argv) == exits.FATAL_CONFIG
    marker = json.loads((out / "checkpoints" / "FATAL.json").read_text())
    assert "/nonexistent/again" in marker["error"] and marker["exit_code"] == 64
    # The retry stops at the marker: it never gets as far as the data checks.
    caplog.set_level(logging.INFO)
    assert attempt.run(argv) == exits.FATAL_CONFIG
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "this config already failed fatally" in errors[-1]
    # A fixed config is not blocked by the marker of the broken one.
    fixed = tiny_args(digits_dir, out, train_steps=2, save_every_steps=1)
    assert attempt.run(fixed) == exits.OK
    records = json.loads((out / "checkpoints" / "attempts.json").read_text())["attempts"]
    assert [r["outcome"] for r in records] == ["fatal_config", "fatal_config", "success"]


def test_cluster_from_vertex_and_tfjob_tf_config():
    vertex = {
        "TF_CONFIG": json.dumps(
            {
                "cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
                "task": {"type": "worker", "index": 0},
            }
        )
    }
    c = distribution.read_cluster(vertex)
    assert (c.num_workers, c.is_chief, c.name) == (3, False, "worker-0")
    tfjob = {
        "TF_CONFIG": json.dumps(
            {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}
        )
    }
    c = distribution.read_cluster(tfjob)
    assert (c.num_workers, c.is_chief) == (2, True)
    single = distribution.read_cluster({})
    assert (single.num_workers, single.is_chief, single.multi_worker) == (1, True, False)
    dirs = distribution.default_dirs(
        {
            "AIP_MODEL_DIR": "gs://my-bucket/model",
            "AIP_CHECKPOINT_DIR": "gs://my-bucket/checkpoints",
        }
    )
    assert dirs == {
        "model_dir": "gs://my-bucket/model",
        "checkpoint_dir": "gs://my-bucket/checkpoints",
        "tensorboard_dir": "",
    }


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--workers", "0"], "--workers 0"),
        (["--signal", "HUP"], "'HUP'"),
        (["--workers", "2", "--preempt-worker", "5"], "--preempt-worker 5"),
        # Issue 57: it started no worker and said "lower --workers".
        (["--workers", "2", "--log-dir", "{file}"], "--log-dir '{file}': '{file}' is a file"),
        (["--log-dir", "{file}/logs"], "'{file}' is a file, not a folder"),
    ],
)
def test_launcher_bad_arguments_are_named(argv, named, capsys, tmp_path):
    from spottrain.trainer import launch

    (tmp_path / "a-file").write_text("mine")
    argv = [a.replace("{file}", str(tmp_path / "a-file")) for a in argv]
    named = named.replace("{file}", str(tmp_path / "a-file"))

    assert launch.main([*argv, "--", "--train-steps", "1"]) == exits.FATAL_CONFIG
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err


def _parse(*flags):
    from spottrain.trainer import config

    return config.parse_args(
        [*flags, "--train-steps", "5", "--checkpoint-dir", "/c", "--model-dir", "/m"], {}
    )


def test_image_flags_are_the_image_tasks_task_args():
    from spottrain.tasks.image.settings import ImageSettings
    from spottrain.trainer import config

    cfg = _parse("--backbone", "mobilenet_v2", "--fine-tune", "--task-args", '{"image_size": 64}')
    assert json.loads(cfg.task_args) == {
        "image_size": 64,
        "backbone": "mobilenet_v2",
        "fine_tune": True,
    }
    assert not hasattr(cfg, "backbone")  # the engine's config holds no image settings
    # The run's --data is the image folder, or the tfds data_dir once a dataset is named.
    folder = ImageSettings.from_args({}, data="/d")
    assert (folder.image_dir, folder.data_dir) == ("/d", "")
    tfds = ImageSettings.from_args({"dataset": "mnist"}, data="/d")
    assert (tfds.image_dir, tfds.data_dir, tfds.dataset) == ("", "/d", "mnist")
    config.validate(cfg)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--task", "examples.regression:Regression", "--image-size", "64"],
         "--image-size: settings of the built-in image classifier; --task examples.regression"),
        (["--backbone", "small_cnn", "--task-args", '{"backbone": "resnet50"}'],
         "--backbone 'small_cnn' contradicts --task-args backbone='resnet50'"),
        (["--task-args", '{"fine_tune": "yes"}'], "--fine-tune 'yes' must be true or false"),
        (["--task-args", '{"val_fraction": 1}'], "--val-fraction 1.0 must be in [0, 1)"),
        (["--task-args", '{"data_dir": "s3://b/x"}'], "--data-dir 's3://b/x': only local"),
    ],
)  # fmt: skip
def test_bad_image_settings_are_one_named_line(flags, named):
    from spottrain.trainer import config

    with pytest.raises(exits.ConfigError) as e:
        config.validate(_parse(*flags))
    assert named in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "flags, keras_task, says, never",
    [
        ({}, False, ["lower --learning-rate (now 0.001)", "set --clip-norm"], []),
        ({"clip_norm": 1.0}, False, ["add --warmup-steps"], ["--clip-norm"]),
        # A KerasTask trains with its compiled optimizer: the flags do nothing to it, and
        # --clip-norm is refused (fit_step.prepare).
        ({}, True, ["optimizer Mine.model() compiles with", "clipnorm=1.0"],
         ["--clip-norm", "--learning-rate", "--warmup-steps"]),
        ({"optimizer": "sgd"}, True, ["lower --learning-rate", "clipnorm on the optimizer"],
         ["--clip-norm"]),
        ({"mixed_precision": True}, True, ["without --mixed-precision"], ["--clip-norm"]),
    ],
)  # fmt: skip
def test_the_nan_advice_names_only_remedies_the_run_accepts(flags, keras_task, says, never):
    import dataclasses

    from spottrain.trainer import advice

    cfg = dataclasses.replace(_parse(), **flags)
    line = advice.nan_advice(cfg, "Mine.model()" if keras_task else "")
    for part in says:
        assert part in line, line
    for part in never:
        assert part not in line, line
