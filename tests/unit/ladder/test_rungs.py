"""The capacity ladder's rungs (spottrain/ladder/__init__.py): parsed, checked, refused."""

from __future__ import annotations

import math

import pytest

from spottrain import exits
from spottrain.ladder import Ladder, LadderError, Rung, check, cross_region, duration_s, parse

T4 = Rung("spot", "n1-standard-8", "nvidia-tesla-t4", 1, 2, "us-central1")


def test_a_ladder_fills_each_rung_from_the_pipelines_shape():
    ladder = parse(
        '[{"capacity": "spot", "patience": "30m"},'
        ' {"capacity": "flex-start", "patience": "2h"},'
        ' {"capacity": "on-demand", "location": "us-east1", "patience": "5m"}]',
        T4,
    )
    assert [r.capacity for r in ladder.rungs] == ["spot", "flex-start", "on-demand"]
    assert [r.patience_s for r in ladder.rungs] == [1800, 7200, math.inf]  # last: for ever
    assert ladder[2].machine_type == "n1-standard-8" and ladder[2].location == "us-east1"
    assert ladder[0].preemptible and not ladder[1].preemptible
    assert ladder[0].replicas == 2 and str(ladder[0]).startswith("spot 2 x n1-standard-8")


REFUSED = [
    # (ladder JSON, a word of the one line)
    ("[]", "the ladder is empty"),
    ("", "the ladder is empty"),
    ('{"capacity": "spot"}', "expected a JSON list"),
    ("[spot]", "not JSON"),
    ('[{"capacity": "cheap"}]', "capacity='cheap'"),
    ('[{"capacity": "spot", "gpus": 2}]', "unknown key 'gpus'"),
    ('[{"capacity": "spot", "gpu_count": "2"}]', "gpu_count='2' is not a whole number"),
    ('[{"capacity": "spot", "gpu_type": "nvidia-gtx-1080"}]', "'nvidia-gtx-1080' is not a GPU"),
    ('[{"capacity": "spot", "machine_type": "n1-standard-7"}]', "'n1-standard-7' does not exist"),
    ('[{"capacity": "spot", "machine_type": "a2-highgpu-1g"}]', "a2-highgpu-1g comes with"),
    ('[{"capacity": "spot", "location": "us-central1-z"}]', "'us-central1-z' does not exist"),
    ('[{"capacity": "spot", "location": "Iowa"}]', "neither a region nor a zone"),
    ('[{"capacity": "spot", "workers": 0}]', "workers=0"),
    ('[{"capacity": "spot", "workers": 100001}]', "workers=100001: expected 1 to 100000"),
    ('[{"capacity": "spot", "workers": ' + "9" * 5001 + "}]", "thousands of digits"),
    ('[{"capacity": "spot", "location": "moon-central1"}]', "'moon-central1' is in no Google"),
    ('[{"capacity": "spot", "location": "moon-central1-a"}]', "'moon-central1-a' is in no"),
    ('[{"capacity": "spot", "patience": 1e400}]', "patience=inf"),
    ('[{"capacity": "spot", "patience": "soon"}]', "patience='soon'"),
    ('[{"capacity": "spot"}, {"capacity": "spot", "patience": "1h"}]', "rung 2 (spot"),
]


@pytest.mark.parametrize(("text", "word"), REFUSED)
def test_a_ladder_no_run_can_use_is_one_line_and_fatal(text, word):
    with pytest.raises(LadderError) as err:
        parse(text, T4)
    assert word in str(err.value) and "\n" not in str(err.value)
    assert err.value.code == exits.FATAL_CONFIG


def test_every_rungs_replicas_divide_the_batch():
    """MultiWorkerMirroredStrategy gives every replica an equal share: a rung of 3 x 1
    GPU cannot take a batch of 64, one of 2 x 2 can."""
    two_by_two = Rung("on-demand", "n1-standard-16", "nvidia-tesla-t4", 2, 2)
    assert check(Ladder((T4, two_by_two)), batch_size=64)
    three = Rung("on-demand", "n1-standard-8", "nvidia-tesla-t4", 1, 3)
    with pytest.raises(LadderError, match="rung 2 .*3 replicas do not divide the batch of 64"):
        check(Ladder((T4, three)), batch_size=64)


def test_a_rung_outside_the_datas_region_is_said_and_refused_unless_allowed():
    far = Rung("on-demand", "n1-standard-8", "nvidia-tesla-t4", 1, 2, "europe-west4-a")
    ladder = check(Ladder((T4, far)))
    with pytest.raises(LadderError, match="rung 2 .* europe-west4 but the data is in us-central1"):
        cross_region(ladder, "us-central1", allow=False)
    (line,) = cross_region(ladder, "us-central1", allow=True)
    assert line.startswith("ladder rung 2 (on-demand") and "egress" in line
    (other,) = cross_region(ladder, "europe-west4", allow=True)
    assert other.startswith("ladder rung 1 (spot") and "data is in europe-west4" in other
    assert cross_region(check(Ladder((T4,))), "us-central1", allow=False) == []


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), (45, 45)]
)
def test_durations(text, seconds):
    assert duration_s(text, "patience") == seconds
