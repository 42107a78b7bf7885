"""The regions where Vertex AI runs custom jobs and pipelines: a region not here is a typo.

A made-up region has no API host (``<region>-aiplatform.googleapis.com`` does not
resolve), which would otherwise read as an outage and be retried. The list is the
public one, https://cloud.google.com/vertex-ai/docs/general/locations, as the
Vertex AI SDK ships it (``google.cloud.aiplatform.constants.base.SUPPORTED_REGIONS``,
google-cloud-aiplatform 1.165.1, less ``global``, which runs no custom job);
tests/integration/pipelines/test_bad_inputs_cli.py checks that the installed SDK knows none
that is not here.
"""

from __future__ import annotations

REGIONS = frozenset(
    {
        "africa-south1",
        "asia-east1",
        "asia-east2",
        "asia-northeast1",
        "asia-northeast2",
        "asia-northeast3",
        "asia-south1",
        "asia-south2",
        "asia-southeast1",
        "asia-southeast2",
        "australia-southeast1",
        "australia-southeast2",
        "europe-central2",
        "europe-north1",
        "europe-north2",
        "europe-southwest1",
        "europe-west1",
        "europe-west2",
        "europe-west3",
        "europe-west4",
        "europe-west6",
        "europe-west8",
        "europe-west9",
        "europe-west12",
        "me-central1",
        "me-central2",
        "me-west1",
        "northamerica-northeast1",
        "northamerica-northeast2",
        "southamerica-east1",
        "southamerica-west1",
        "us-central1",
        "us-east1",
        "us-east4",
        "us-east5",
        "us-east7",
        "us-south1",
        "us-west1",
        "us-west2",
        "us-west3",
        "us-west4",
        "us-west8",
    }
)


def region_problem(region: str) -> str | None:
    """Why ``region`` is no Vertex AI region (naming the closest one), or ``None``."""
    if region in REGIONS:
        return None
    import difflib

    close = difflib.get_close_matches(region, sorted(REGIONS), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"is not a Vertex AI region: {hint}see "
        "https://cloud.google.com/vertex-ai/docs/general/locations"
    )
