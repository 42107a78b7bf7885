"""The run and attempt as labels, so a billing export can confirm the ledger's figures.

Two label systems, one sanitiser (:func:`label_value`):

* **Kubernetes** (JobSets and their pods): keys ``spottrain.dev/run`` and
  ``spottrain.dev/attempt``; a value is at most 63 characters of ``[A-Za-z0-9_.-]``
  beginning and ending alphanumeric, or empty (k8s.io/apimachinery
  ``pkg/util/validation/validation.go`` ``IsValidLabelValue``: ``LabelValueMaxLength
  = 63``, ``labelValueFmt = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"``). GKE cost
  allocation carries a pod's labels into the detailed billing export as
  ``k8s-label/<key>`` (https://cloud.google.com/kubernetes-engine/docs/how-to/cost-allocations).
* **Google Cloud** (Vertex custom jobs): keys and values of lowercase letters, digits,
  ``_`` and ``-``, at most 63 characters, keys beginning with a letter
  (https://cloud.google.com/resource-manager/docs/labels-overview#requirements;
  aiplatform_v1 ``CustomJob.labels``: "can only contain lowercase letters, numeric
  characters, underscores and dashes"), so ``spottrain-run`` and ``spottrain-attempt``.
  A custom job's labels reach the billing export's ``labels`` column as they are.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping

log = logging.getLogger(__name__)

K8S_RUN, K8S_ATTEMPT = "spottrain.dev/run", "spottrain.dev/attempt"
GCP_RUN, GCP_ATTEMPT = "spottrain-run", "spottrain-attempt"
MAX_LENGTH = 63
RULES = ("k8s", "gcp")
_BAD = {"k8s": re.compile(r"[^A-Za-z0-9_.-]+"), "gcp": re.compile(r"[^a-z0-9_-]+")}
_ENDS = {"k8s": "-_.", "gcp": ""}


def label_value(text: str, rules: str = "k8s") -> str:
    """``text`` as a valid label value under ``rules`` (``k8s`` or ``gcp``).

    Characters the rules refuse become ``-``. A value cut to 63 characters keeps a
    short hash of the whole, so two long run ids that share a prefix stay apart.

    Raises:
        ValueError: on unknown ``rules``.
    """
    if rules not in RULES:
        raise ValueError(f"rules={rules!r}: expected one of {', '.join(RULES)}")
    raw = str(text)
    value = _BAD[rules].sub("-", raw.lower() if rules == "gcp" else raw)
    if len(value) > MAX_LENGTH:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
        value = f"{value[: MAX_LENGTH - 9]}-{digest}"
    # Kubernetes wants alphanumeric ends; GCP values may begin or end with - or _.
    return value.strip(_ENDS[rules] + "-") if rules == "k8s" else value


def labels(run: str, attempt: int | str | None, rules: str) -> dict[str, str]:
    """The run and attempt labels under ``rules`` (``k8s``, ``gcp``), empty values left out."""
    values = (label_value(run, rules) if run else "",
              "" if attempt is None else label_value(str(attempt), rules))  # fmt: skip
    keys = (K8S_RUN, K8S_ATTEMPT) if rules == "k8s" else (GCP_RUN, GCP_ATTEMPT)
    return {k: v for k, v in zip(keys, values, strict=True) if v}


def k8s_labels(run: str, attempt: int | str | None = None) -> dict[str, str]:
    """The Kubernetes labels of a run's objects (a JobSet and its pods)."""
    return labels(run, attempt, "k8s")


def gcp_labels(run: str, attempt: int | str | None = None) -> dict[str, str]:
    """The Google Cloud labels of a run's resources (a Vertex custom job)."""
    return labels(run, attempt, "gcp")


# The labels an attempt's job or pods carry, as a JSON object: the ledger copies them
# into the attempt's record ("bill_labels"), the row the billing export's labels join.
LABELS_ENV = "SPOTTRAIN_BILL_LABELS"


def env_value(labels: dict[str, str]) -> str:
    """The :data:`LABELS_ENV` value of ``labels``."""
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))


def from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The labels in :data:`LABELS_ENV` (``{}``: unset, or bad, said in one line)."""
    raw = environ.get(LABELS_ENV, "").strip()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            raise ValueError("expected a JSON object of text values")
        return data
    except ValueError as err:
        log.warning("%s=%r ignored: %s", LABELS_ENV, raw, err)
        return {}
