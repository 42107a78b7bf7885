"""Machine shapes, GPU names and locations."""

from __future__ import annotations

import pytest

from spottrain.pricing import zones
from spottrain.pricing.machines import FAMILIES, Shape, gpu_key, problem, region_of, shape


@pytest.mark.parametrize(
    "machine, expected",
    [
        ("n1-standard-8", Shape("n1", 8, 30.0)),
        ("n1-highmem-4", Shape("n1", 4, 26.0)),
        ("N1-STANDARD-1", Shape("n1", 1, 3.75)),
        ("g2-standard-8", Shape("g2", 8, 32, "l4", 1)),
        ("g2-standard-24", Shape("g2", 24, 96, "l4", 2)),
        ("a2-highgpu-1g", Shape("a2", 12, 85, "a100-40gb", 1)),
        ("a2-ultragpu-8g", Shape("a2", 96, 1360, "a100-80gb", 8)),
        ("a3-highgpu-8g", Shape("a3", 208, 1872, "h100-80gb", 8)),
        ("e2-standard-4", None),
        ("n1-standard-", None),
        ("", None),
    ],
)
def test_shapes(machine, expected):
    assert shape(machine) == expected


@pytest.mark.parametrize(
    "name, key",
    [
        ("nvidia-tesla-t4", "t4"),
        ("NVIDIA_TESLA_T4", "t4"),
        ("nvidia-l4", "l4"),
        ("NVIDIA_L4", "l4"),
        ("nvidia-tesla-a100", "a100-40gb"),
        ("NVIDIA_A100_80GB", "a100-80gb"),
        ("nvidia-h100-80gb", "h100-80gb"),
        ("nvidia-h100-mega-80gb", None),
        ("TPU_V3", None),
    ],
)
def test_gpu_names_of_gke_and_vertex_meet(name, key):
    assert gpu_key(name) == key


@pytest.mark.parametrize(
    "location, region",
    [
        ("us-central1", "us-central1"),
        ("us-central1-a", "us-central1"),
        ("europe-west4-b", "europe-west4"),
        ("northamerica-northeast1-c", "northamerica-northeast1"),
        ("us", None),
        ("", None),
        ("us-central1-a-b", None),
    ],
)
def test_a_zone_is_priced_in_its_region(location, region):
    assert region_of(location) == region


@pytest.mark.parametrize(
    "location, why",
    [
        ("us-central1-f", ""),
        ("us-central1", ""),  # a region: the catalog knows its regions
        ("us-central1-e", "zone 'us-central1-e' does not exist: us-central1 has zones a, b, c, f"),
        ("europe-west1-a", "zone 'europe-west1-a' does not exist: europe-west1 has zones b, c, d"),
        ("us-north9-q", ""),  # a region not listed, in a known geography: let through
        (
            "mars-central1-q",
            "location 'mars-central1-q' is in no Google Cloud geography "
            "(africa, asia, australia, europe, me, northamerica, southamerica, us)",
        ),
        ("", ""),
    ],
)
def test_a_zone_that_does_not_exist_is_named(location, why):
    assert zones.problem(location) == why


def test_every_type_of_the_family_table_is_a_shape_with_no_problem():
    for family in FAMILIES.values():
        for name in family.types:
            assert shape(name) is not None and problem(name) == "", name
