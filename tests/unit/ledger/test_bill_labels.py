"""The run and attempt labels (ledger.bill_labels): one sanitiser, both platforms' rules."""

from __future__ import annotations

import re

import pytest

from spottrain.ledger import bill_labels

# k8s.io/apimachinery pkg/util/validation/validation.go labelValueFmt, and the GCP
# label rules (lowercase letters, digits, _ and -; 63 characters).
K8S_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
GCP_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
LONG = "run-" + "x" * 80


@pytest.mark.parametrize(
    "text, k8s, gcp",
    [
        ("6f1c2a9e-0b7d-4c3e-9d2f-1a2b3c4d5e6f", "6f1c2a9e-0b7d-4c3e-9d2f-1a2b3c4d5e6f",
         "6f1c2a9e-0b7d-4c3e-9d2f-1a2b3c4d5e6f"),
        ("Run_1.A", "Run_1.A", "run_1-a"),
        ("-spot/3-", "spot-3", "-spot-3-"),
        ("projects/p/locations/us-central1/customJobs/42",
         "projects-p-locations-us-central1-customJobs-42",
         "projects-p-locations-us-central1-customjobs-42"),
        ("éß run", "run", "-run"),
        ("", "", ""),
        ("2", "2", "2"),
    ],
)  # fmt: skip
def test_values_are_sanitised_to_each_platforms_rules(text, k8s, gcp):
    assert bill_labels.label_value(text) == k8s and K8S_VALUE.fullmatch(k8s)
    assert bill_labels.label_value(text, "gcp") == gcp and GCP_VALUE.fullmatch(gcp)


def test_a_long_value_is_cut_to_63_and_keeps_a_hash_of_the_whole():
    a = bill_labels.label_value(LONG)
    b = bill_labels.label_value(LONG + "y")
    assert len(a) == len(b) == 63 and a != b and a.startswith("run-xxx")
    assert K8S_VALUE.fullmatch(a) and GCP_VALUE.fullmatch(bill_labels.label_value(LONG, "gcp"))


def test_unknown_rules_are_one_line_naming_them():
    with pytest.raises(ValueError, match=r"rules='aws': expected one of k8s, gcp"):
        bill_labels.label_value("x", "aws")


def test_the_label_sets_use_each_platforms_keys_and_leave_empty_values_out():
    k8s = {"spottrain.dev/run": "Run-1", "spottrain.dev/attempt": "2"}
    assert bill_labels.k8s_labels("Run 1", 2) == k8s
    gcp = {"spottrain-run": "run-1", "spottrain-attempt": "spot-1"}
    assert bill_labels.gcp_labels("Run 1", "spot-1") == gcp
    assert bill_labels.k8s_labels("") == {} and bill_labels.gcp_labels("???") == {
        "spottrain-run": "-"
    }
    # GCP keys: lowercase letters, digits, _ and -, beginning with a letter.
    for key in (bill_labels.GCP_RUN, bill_labels.GCP_ATTEMPT):
        assert re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key)
