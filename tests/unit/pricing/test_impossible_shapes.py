"""Machines Compute Engine does not offer are "price unknown" with the reason (issue 42, 4).

Before, the price was made up from the parts: n1-standard-999 as 999 vCPUs ($9.49/h
spot from the stand-in's SKUs), an A100 on an N1, 3 T4s, 16 L4s on a g2-standard-4
(one L4's price times 16), and a zone that does not exist as its region.
"""

from __future__ import annotations

import json

import pytest
from google.cloud import billing_v1

from spottrain.pricing import Quote, Sources, Usage, quote, quoting
from spottrain.pricing.__main__ import main
from spottrain.pricing.cache import save
from spottrain.pricing.catalog import GOOGLE
from spottrain.pricing.skus import PriceTable, rate_of
from spottrain.testing.billing_catalog_data import COMPUTE


@pytest.fixture(autouse=True)
def _fresh_process_memory():
    quoting.forget()
    yield
    quoting.forget()


@pytest.fixture
def cached(tmp_path):
    """The stand-in catalog's SKUs through the real parser, as a fresh cache."""
    table = PriceTable(origin=GOOGLE)
    for kwargs in COMPUTE:
        if (rate := rate_of(billing_v1.Sku(**kwargs))[0]) is not None:
            table.add(rate)
    path = tmp_path / "prices.json"
    assert save(path, table) == ""
    return Sources(catalog_endpoint="off", cache_path=path)


IMPOSSIBLE = [
    (Usage("us-central1-a", "n1-standard-999"),
     "machine type 'n1-standard-999' does not exist: n1-standard has 1, 2, 4, 8, 16, 32, "
     "64 or 96 vCPUs"),
    (Usage("us-central1-a", "n1-highmem-1"),
     "machine type 'n1-highmem-1' does not exist: n1-highmem has 2, 4, 8, 16, 32, 64 or 96 "
     "vCPUs"),
    (Usage("us-central1-a", "g2-standard-5"),
     "machine type 'g2-standard-5' does not exist: the G2 types are g2-standard-4, "
     "g2-standard-8, g2-standard-12, g2-standard-16, g2-standard-24, g2-standard-32, "
     "g2-standard-48, g2-standard-96"),
    (Usage("us-central1-a", "n1-standard-8", "nvidia-tesla-a100", 1),
     "n1-standard-8 cannot have nvidia-tesla-a100 GPUs: N1 takes nvidia-tesla-t4, "
     "nvidia-tesla-v100, nvidia-tesla-p100 or nvidia-tesla-p4 (nvidia-tesla-a100 comes "
     "only built into A2 types)"),
    (Usage("us-central1-a", "n1-standard-8", "NVIDIA_L4", 1),
     "n1-standard-8 cannot have NVIDIA_L4 GPUs: N1 takes nvidia-tesla-t4, "
     "nvidia-tesla-v100, nvidia-tesla-p100 or nvidia-tesla-p4 (nvidia-l4 comes only "
     "built into G2 types)"),
    (Usage("us-central1-a", "n1-standard-8", "nvidia-tesla-t4", 3),
     "n1-standard-8 cannot have 3 nvidia-tesla-t4: N1 takes 1, 2 or 4 of them"),
    (Usage("us-central1-a", "n1-standard-64", "nvidia-tesla-t4", 1),
     "n1-standard-64 cannot have 1 nvidia-tesla-t4: with 1, N1 allows at most 48 vCPUs"),
    (Usage("us-central1-a", "n1-standard-16", "nvidia-tesla-v100", 1),
     "n1-standard-16 cannot have 1 nvidia-tesla-v100: with 1, N1 allows at most 12 vCPUs"),
    (Usage("us-central1-a", "g2-standard-4", "nvidia-l4", 16),
     "g2-standard-4 comes with 1 nvidia-l4, not 16"),
    (Usage("us-central1-a", "g2-standard-4", "", 16),
     "g2-standard-4 comes with 1 nvidia-l4, not 16"),
    (Usage("us-central1-a", "a2-highgpu-1g", "nvidia-l4", 1),
     "a2-highgpu-1g comes with 1 nvidia-tesla-a100, not nvidia-l4"),
    (Usage("us-central1-a", "n1-standard-8", "", 2),
     "2 GPUs of no named type"),
    (Usage("us-central1-z", "n1-standard-8"),
     "zone 'us-central1-z' does not exist: us-central1 has zones a, b, c, f"),
    (Usage("us-east1-a", "n1-standard-8", "nvidia-tesla-t4", 1),
     "zone 'us-east1-a' does not exist: us-east1 has zones b, c, d"),
]  # fmt: skip


@pytest.mark.parametrize("usage, reason", IMPOSSIBLE, ids=[str(c[0]) for c in IMPOSSIBLE])
def test_a_machine_compute_engine_does_not_offer_has_no_price(cached, usage, reason):
    assert quote(usage, cached) == Quote(None, None, reason=f"price unknown: {reason}")


@pytest.mark.parametrize(
    "usage",
    [
        Usage("us-central1-f", "n1-standard-96"),
        Usage("us-central1-a", "n1-standard-32", "nvidia-tesla-t4", 1),
        Usage("us-central1-a", "n1-highmem-96", "nvidia-tesla-t4", 4),
        Usage("us-central1-b", "g2-standard-24", "nvidia-l4", 2),
        Usage("us-central1-b", "g2-standard-24"),
        Usage("us-central1", "a2-ultragpu-1g", "nvidia-a100-80gb", 1),
        Usage("europe-west4-a", "n1-standard-8", "nvidia-tesla-t4", 2),
    ],
    ids=str,
)
def test_what_compute_engine_offers_is_still_priced(cached, usage):
    q = quote(usage, cached)
    assert q.spot is not None and q.on_demand is not None and q.reason == "", q


def test_no_override_prices_a_machine_that_does_not_exist():
    inline = '{"machine": {"n1-standard-999": {"spot": 1, "on_demand": 2}}}'
    q = quote(Usage("", "n1-standard-999"), Sources.from_env({"SPOTTRAIN_PRICES": inline}))
    assert (q.spot, q.on_demand) == (None, None)
    assert q.reason.startswith("price unknown: machine type 'n1-standard-999' does not exist")


def test_the_command_says_price_unknown_and_why(cached, monkeypatch, capsys):
    monkeypatch.setenv("SPOTTRAIN_CATALOG_ENDPOINT", "off")
    monkeypatch.setenv("SPOTTRAIN_PRICE_CACHE", str(cached.cache_path))
    assert main(["quote", "--location", "us-central1-a", "--machine", "n1-standard-999"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["spot"], printed["on_demand"]) == (None, None)
    assert printed["reason"].startswith("price unknown: machine type 'n1-standard-999'")
