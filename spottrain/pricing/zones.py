"""Compute Engine's zones, so that a zone that does not exist is not priced as its region.

A zone is ``<region>-<letter>``, but not every letter exists in every region (us-east1
has b, c and d; us-central1 a, b, c and f). The regions and their zones, from the table of
https://cloud.google.com/compute/docs/regions-zones ("Available regions and zones").
A region not listed here (a newer one) is not judged: the price catalog's SKUs name
the regions it prices, and a region it does not price has no price anyway.
"""

from __future__ import annotations

from spottrain.pricing.machines import region_of

__all__ = ["GEOGRAPHIES", "ZONES", "problem"]

_ABC = "abc"
ZONES: dict[str, str] = {
    **dict.fromkeys(
        """africa-south1 asia-east1 asia-east2 asia-northeast1 asia-northeast2
        asia-northeast3 asia-south1 asia-south2 asia-southeast1 asia-southeast2
        australia-southeast1 australia-southeast2 europe-central2 europe-north1
        europe-north2 europe-southwest1 europe-west2 europe-west3 europe-west4
        europe-west6 europe-west8 europe-west9 europe-west10 europe-west12 me-central1
        me-central2 me-west1 northamerica-northeast1 northamerica-northeast2
        northamerica-south1 southamerica-east1 southamerica-west1 us-east4 us-east5
        us-south1 us-west1 us-west2 us-west3 us-west4""".split(),
        _ABC,
    ),
    "europe-west1": "bcd",
    "us-central1": "abcf",
    "us-east1": "bcd",
}


# The geographies every region is named in (the part before the first "-"). A newer
# region in one of them is let through; one in none (``moon-central1``) is a typo.
GEOGRAPHIES = frozenset(r.split("-")[0] for r in ZONES)


def problem(location: str) -> str:
    """Why ``location`` is a place that does not exist; ``""`` when it may.

    A region not in :data:`ZONES` (a newer one), and its zones, are judged only by
    their geography.
    """
    name = location.strip().lower()
    region = region_of(name)
    if region is not None and region.split("-")[0] not in GEOGRAPHIES:
        return (
            f"location {name!r} is in no Google Cloud geography ({', '.join(sorted(GEOGRAPHIES))})"
        )
    if region is None or region == name or region not in ZONES:
        return ""
    letter = name[len(region) + 1 :]
    if letter in ZONES[region]:
        return ""
    return f"zone {name!r} does not exist: {region} has zones {', '.join(ZONES[region])}"
