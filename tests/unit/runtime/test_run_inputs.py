"""A train_job run's inputs are the component's parameters, one frozen object, made once.

A new setting of the JobSet run is its parameter in components/train_job/component.py
and its field in spottrain/runtime/train_job/inputs.py (the component's body, which KFP
copies into the compiled YAML, names it once more): these tests fail until the three
agree, and show that what the pipelines' pre-flight checks is what the pod checks.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from spottrain.components.train_job.component import train_job
from spottrain.runtime.train_job import component as runtime
from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_job.inputs import GangInputs, InputError, RunInputs
from spottrain.runtime.train_settings import TrainSettings

# The component's outputs and its data artifact: KFP's, not the run's settings
# (RunInputs has the artifact's gs:// folder, data_dir).
ARTIFACTS = {"data", "model", "metrics", "attempts", "report", "classification"}
# RunInputs' fields the component does not take as such: data_dir is the ``data``
# artifact's folder; settings the TrainSettings the body makes from its parameters.
MADE_BY_THE_BODY = {"data_dir", "settings"}

SIGNATURE = inspect.signature(train_job.python_func).parameters
GS = dict(data_dir="gs://b/data", checkpoint_dir="gs://b/ckpt", run_id="r-1", task_name="t")


def test_the_components_parameters_are_the_run_inputs_fields_and_the_train_settings():
    run_params = set(SIGNATURE) - ARTIFACTS - set(TrainSettings.names())
    assert run_params == RunInputs.names() - MADE_BY_THE_BODY
    assert GangInputs.names() < RunInputs.names()
    assert not {"placement", "run_seconds"} & RunInputs.names()  # derived, not given


def test_the_fields_defaults_are_the_components():
    fields = {f.name: f for f in dataclasses.fields(RunInputs) if f.init}
    for name in RunInputs.names() - MADE_BY_THE_BODY:
        given = SIGNATURE[name].default
        default = fields[name].default
        if given is inspect.Parameter.empty:
            assert default is dataclasses.MISSING, name
        elif name == "extra_args":
            assert (list(default), given) == ([], [])  # a tuple here: the object is frozen
        else:
            assert (default, type(default)) == (given, type(given)), name


def test_the_component_body_hands_every_input_on_by_name(monkeypatch):
    """The body KFP runs: what it gives run_component makes a RunInputs, nothing left."""
    given: dict = {}
    monkeypatch.setattr(runtime, "run_component", lambda **kw: given.update(kw))
    artifacts = {name: object() for name in ARTIFACTS}
    required = {n: "x" for n, p in SIGNATURE.items() if p.default is inspect.Parameter.empty}
    train_job.python_func(**{**required, **artifacts})
    assert set(given) - ARTIFACTS == RunInputs.names() - {"data_dir"}
    inputs = {k: v for k, v in given.items() if k not in ARTIFACTS}
    run = RunInputs(**{**inputs, **GS})
    assert run.settings == TrainSettings() and run.workers == 1


def test_the_run_is_frozen_and_gives_the_launcher_its_settings_and_placement():
    run = RunInputs(**GS, settings=TrainSettings(), pool="spot", unschedulable_timeout=300,
                    deadline="3600s", admission_timeout=60, extra_args=["--seed", "7"])  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.workers = 2  # type: ignore[misc]
    assert run.extra_args == ("--seed", "7")
    assert run.launcher_settings() == d.Settings(
        capacity_deadline=300, deadline=3600, admission_deadline=60
    )
    assert (run.placement.pool, run.placement.gpu_count, run.run_seconds) == ("spot", 1, 3600)
    assert dataclasses.replace(run, pool="on-demand").placement.pool == "on-demand"


def test_the_pre_flight_and_the_pod_refuse_the_gang_with_the_same_words():
    with pytest.raises(InputError) as submit:
        GangInputs(queue="team-a", pool="preemptible")
    with pytest.raises(InputError) as pod:
        RunInputs(**GS, settings=TrainSettings(), queue="team-a", pool="preemptible")
    assert str(submit.value) == str(pod.value) and pod.value.code == 64


def test_finish_by_is_checked_as_written_at_submit_and_against_the_ledger_in_the_pod():
    """A retry keeps the time its first launcher read (for_the_deadline), though it may be
    past by then: the pod does not refuse it as written."""
    with pytest.raises(InputError, match="finish_by='2020-01-01T00:00:00Z'"):
        GangInputs(finish_by="2020-01-01T00:00:00Z")
    RunInputs(**GS, settings=TrainSettings(), finish_by="2020-01-01T00:00:00Z")
