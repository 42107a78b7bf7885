"""quote(): parts, overrides, the cache and every way to "price unknown", in-process.

The catalog is off here (SPOTTRAIN_CATALOG_ENDPOINT=off): the table comes from a cache
file built from the stand-in's SKUs through the real parser. The catalog client against
the stand-in is tests/integration/pricing/test_catalog_client.py.
"""

from __future__ import annotations

import json
import logging
import sys
import time

import pytest
from google.cloud import billing_v1

from spottrain.pricing import Quote, Sources, Usage, quote, quoting
from spottrain.pricing.cache import load, save
from spottrain.pricing.catalog import GOOGLE
from spottrain.pricing.skus import PriceTable, rate_of
from spottrain.testing.billing_catalog_data import COMPUTE

T4_N1_8 = Usage("us-central1-a", "n1-standard-8", "nvidia-tesla-t4", 1)
# The stand-in's illustrative prices: 8 vCPUs, 30 GiB and one T4 in us-central1.
N1_8_ON_DEMAND = 8 * 0.031611 + 30 * 0.004237
N1_8_SPOT = 8 * 0.00632 + 30 * 0.000847


@pytest.fixture(autouse=True)
def _fresh_process_memory():
    quoting.forget()
    yield
    quoting.forget()


def table(fetched_at=None):
    t = PriceTable(origin=GOOGLE, fetched_at=time.time() if fetched_at is None else fetched_at)
    for kwargs in COMPUTE:
        rate, _ = rate_of(billing_v1.Sku(**kwargs))
        if rate:
            t.add(rate)
    return t


@pytest.fixture
def cached(tmp_path):
    path = tmp_path / "prices.json"
    assert save(path, table()) == ""
    return Sources(catalog_endpoint="off", cache_path=path)


def test_a_gke_node_is_cores_ram_and_gpus_in_its_region(cached):
    q = quote(T4_N1_8, cached)
    assert q.spot == pytest.approx(N1_8_SPOT + 0.14)
    assert q.on_demand == pytest.approx(N1_8_ON_DEMAND + 0.35)
    assert (q.currency, q.reason) == ("USD", "")
    assert q.source.startswith("cache of Cloud Billing Catalog (cloudbilling.googleapis.com)")
    q2 = quote(Usage("europe-west4", "n1-standard-8", "nvidia-tesla-t4", 2), cached)
    # Netherlands: its own prices, the core's list price from its tier at 0.
    assert q2.on_demand == pytest.approx(8 * 0.034806 + 30 * 0.004664 + 2 * 0.37)


def test_gpu_machine_families_bring_their_gpus(cached):
    q = quote(Usage("us-central1-b", "g2-standard-8"), cached)
    assert q.on_demand == pytest.approx(8 * 0.02495 + 32 * 0.002923 + 0.56)
    assert q.spot == pytest.approx(8 * 0.00998 + 32 * 0.001169 + 0.22)
    a2 = quote(Usage("us-central1", "a2-ultragpu-1g", "nvidia-a100-80gb", 1), cached)
    assert a2.on_demand == pytest.approx(12 * 0.031611 + 170 * 0.004237 + 3.93)


@pytest.mark.parametrize(
    "usage, reason",
    [
        (Usage("us-central1", ""), "price unknown: machine type unknown"),
        (Usage("us-central1", "n1-standard-8", "nvidia-tesla-k80", 1),
         "price unknown: GPU type 'nvidia-tesla-k80' is not one spottrain knows"),
        (Usage("us-central1", "n1-standard-8", "nvidia-tesla-t4", 0),
         "price unknown: GPU count of 'nvidia-tesla-t4' unknown"),
        (Usage("somewhere", "n1-standard-8"),
         "price unknown: location 'somewhere' is not a region or zone"),
        (Usage("us-central1", "e2-standard-4"),
         "price unknown: machine type 'e2-standard-4' is not in spottrain's table of shapes"),
        (Usage("asia-south1", "n1-standard-8"),
         "price unknown: spot: no spot SKU for core:n1 in asia-south1; "
         "on-demand: no on-demand SKU for core:n1 in asia-south1"),
    ],
)  # fmt: skip
def test_what_cannot_be_priced_says_why(cached, usage, reason):
    assert quote(usage, cached) == Quote(None, None, reason=reason)


def test_one_side_known_is_given_with_the_other_side_s_reason(tmp_path):
    t = table()
    del t.prices[PriceTable.key("gpu:t4", "spot", "us-central1")]
    save(tmp_path / "p.json", t)
    q = quote(T4_N1_8, Sources(catalog_endpoint="off", cache_path=tmp_path / "p.json"))
    assert q.spot is None and q.on_demand == pytest.approx(N1_8_ON_DEMAND + 0.35)
    assert q.reason == "spot price unknown: no spot SKU for gpu:t4 in us-central1"


def test_overrides_win_part_by_part_and_name_both_sources(cached, tmp_path):
    prices = tmp_path / "contract.json"
    prices.write_text(json.dumps({"gpu": {"NVIDIA_TESLA_T4": {"spot": 0.1, "on_demand": 0.3}}}))
    env = {"SPOTTRAIN_PRICES": str(prices), "SPOTTRAIN_CATALOG_ENDPOINT": "OFF",
           "SPOTTRAIN_PRICE_CACHE": str(cached.cache_path)}  # fmt: skip
    q = quote(T4_N1_8, Sources.from_env(env))
    assert q.spot == pytest.approx(N1_8_SPOT + 0.1)
    assert q.on_demand == pytest.approx(N1_8_ON_DEMAND + 0.3)
    assert q.source.startswith("SPOTTRAIN_PRICES + cache of Cloud Billing Catalog")
    # A whole machine from the overrides needs no catalog at all, nor a shape.
    inline = '{"machine": {"e2-standard-4": {"spot": 0.04, "on_demand": 0.13}}}'
    q = quote(Usage("", "e2-standard-4"), Sources.from_env({"SPOTTRAIN_PRICES": inline}))
    assert q == Quote(0.04, 0.13, "USD", "SPOTTRAIN_PRICES", "")


@pytest.mark.parametrize(
    "value, line",
    [
        ('{"gpu": {"nvidia-tesla-t4": {"spot": "cheap"}}}',
         "gpu.nvidia-tesla-t4.spot is 'cheap', not a number >= 0"),
        ('{"gpu": {"nvidia-tesla-t4": {"spot": -1}}}',
         "gpu.nvidia-tesla-t4.spot is -1, not a number >= 0"),
        ('{"gpu": {"nvidia-tesla-t4": {"spot": true}}}',
         "gpu.nvidia-tesla-t4.spot is True, not a number >= 0"),
        ('{"gpu": {"nvidia-tesla-t4": {"preemptible": 1}}}',
         "gpu.nvidia-tesla-t4 has 'preemptible'; expected 'spot' or 'on_demand'"),
        ('{"gpu": {"nvidia-rtx-9090": {"spot": 1}}}',
         "gpu 'nvidia-rtx-9090' is not a GPU spottrain knows"),
        ('{"gpus": {}}', "the top level has 'gpus'; expected 'gpu' and 'machine'"),
        ('{"currency": "dollars"}', "currency 'dollars' is not an ISO 4217 code"),
        ("[1]", "is [1], not a JSON object"),
        ("{nope", "not JSON: Expecting property name enclosed in double quotes"),
        ("/nonexistent/prices.json", "cannot read '/nonexistent/prices.json'"),
        ("gpu:\n  nvidia-tesla-t4:\n    spot: 0.1",
         "'gpu:\\n  nvidia-tesla-t4:\\n    spot: 0.1'... is neither JSON"),
    ],
)  # fmt: skip
def test_a_bad_override_is_one_line_naming_the_value_and_no_price(value, line, caplog):
    with caplog.at_level(logging.WARNING):
        sources = Sources.from_env({"SPOTTRAIN_PRICES": value})
    q = quote(T4_N1_8, sources)
    assert (q.spot, q.on_demand) == (None, None)
    assert q.reason.startswith(f"price unknown: SPOTTRAIN_PRICES {line}")
    assert "\n" not in q.reason
    assert any(line in r.getMessage() for r in caplog.records)


def test_vertex_is_not_priced_from_compute_engine_skus(cached):
    usage = Usage("us-central1", "n1-standard-8", "NVIDIA_TESLA_T4", 1, platform="vertex")
    q = quote(usage, cached)
    assert (q.spot, q.on_demand, q.source) == (None, None, "")
    assert q.reason.startswith("price unknown: Vertex AI prices are not read from the catalog")
    # The top level (GKE's) does not price Vertex either; its own section does.
    over = {"gpu": {"nvidia-tesla-t4": {"on_demand": 0.3}},
            "vertex": {"gpu": {"NVIDIA_TESLA_T4": {"on_demand": 0.45}},
                       "machine": {"n1-standard-8": {"on_demand": 0.44}}}}  # fmt: skip
    q = quote(usage, Sources.from_env({"SPOTTRAIN_PRICES": json.dumps(over)}))
    assert q.on_demand == pytest.approx(0.89) and q.spot is None
    assert q.source == "SPOTTRAIN_PRICES"
    assert q.reason.startswith("spot price unknown: Vertex AI prices are not read")


def test_a_stale_cache_is_still_used_saying_so(tmp_path):
    path = tmp_path / "p.json"
    save(path, table(fetched_at=time.time() - 8 * 24 * 3600))
    q = quote(T4_N1_8, Sources(catalog_endpoint="off", cache_path=path))
    assert q.on_demand == pytest.approx(N1_8_ON_DEMAND + 0.35)
    assert q.source.startswith("stale cache of Cloud Billing Catalog")


@pytest.mark.parametrize(
    "content, reason",
    [
        (None, "price unknown: the catalog is off and no cache yet"),
        ("{", "unreadable"),
        ('{"version": 1, "table": {"prices": {"k": "x"}, "fetched_at": 1}}',
         "malformed: 'prices' is not an object of numbers"),
        ('{"version": 0}', "is not a version-1 price cache"),
    ],
)  # fmt: skip
def test_no_usable_cache_and_no_catalog_is_price_unknown(tmp_path, content, reason):
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    q = quote(T4_N1_8, Sources(catalog_endpoint="off", cache_path=path))
    assert (q.spot, q.on_demand) == (None, None)
    assert reason in q.reason and q.reason.startswith("price unknown: ")


def test_a_cache_of_another_catalog_or_currency_is_not_used(tmp_path):
    path = tmp_path / "p.json"
    t = table()
    t.origin = "127.0.0.1:5000"
    save(path, t)
    assert load(path, GOOGLE, "USD") == (None, "cache holds 127.0.0.1:5000 in USD")
    assert load(path, "127.0.0.1:5000", "EUR") == (None, "cache holds 127.0.0.1:5000 in USD")
    assert load(path, "127.0.0.1:5000", "USD")[0] == t


def test_without_google_cloud_billing_the_reason_says_so(tmp_path, monkeypatch):
    # None in sys.modules is how Python marks a module as absent: its import then fails.
    monkeypatch.setitem(sys.modules, "google.cloud.billing_v1", None)
    sources = Sources(catalog_endpoint="", cache_path=tmp_path / "none.json")
    assert quote(T4_N1_8, sources) == Quote(
        None, None, reason="price unknown: google-cloud-billing is not installed"
    )


def test_env_defaults_and_a_bad_deadline(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    s = Sources.from_env({})
    assert s.cache_path == tmp_path / "spottrain" / "prices.json"
    assert (s.catalog_endpoint, s.deadline_s, s.overrides) == ("", 5.0, None)
    with caplog.at_level(logging.WARNING):
        s = Sources.from_env({"SPOTTRAIN_PRICE_DEADLINE_S": "soon"})
    assert s.deadline_s == 5.0
    assert "SPOTTRAIN_PRICE_DEADLINE_S='soon' is not a number of seconds > 0" in caplog.text
    assert Sources.from_env({"SPOTTRAIN_PRICE_DEADLINE_S": "0.5"}).deadline_s == 0.5


def test_quote_never_raises(monkeypatch):
    def boom(*_):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(quoting, "price", boom)
    assert quote(T4_N1_8, Sources()) == Quote(
        None, None, reason="price unknown: RuntimeError: a bug over two lines"
    )
