"""google-cloud-billing's real CloudCatalogClient against the catalog stand-in on loopback.

The stand-in (spottrain/testing/billing_catalog.py) is a gRPC server answering
google.cloud.billing.v1.CloudCatalog with the API's own messages, cutting pages at 4
items, so the client's paging, the deadline and the cache run as they would against
cloudbilling.googleapis.com.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time

import pytest
from ports import held_port

from spottrain.pricing import Sources, Usage, quote, quoting
from spottrain.pricing.cache import load
from spottrain.pricing.catalog import CatalogError, _client, fetch
from spottrain.pricing.skus import PriceTable
from spottrain.testing.billing_catalog import Catalog, serve
from spottrain.testing.billing_catalog_data import COMPUTE

T4_N1_8 = Usage("us-central1-a", "n1-standard-8", "nvidia-tesla-t4", 1)
N1_8_T4_ON_DEMAND = 8 * 0.031611 + 30 * 0.004237 + 0.35


@pytest.fixture(autouse=True)
def _fresh_process_memory():
    quoting.forget()
    yield
    quoting.forget()


def test_the_real_client_pages_through_both_services():
    with serve() as (catalog, address):
        client = _client(address)
        try:
            names = {s.display_name: s.service_id for s in client.list_services()}
            vertex = list(client.list_skus(parent=f"services/{names['Vertex AI']}"))
        finally:
            client.transport.close()
        assert names["Compute Engine"] == "6F81-5844-456A"
        assert names["Vertex AI"] == "C7E2-9256-1C43"
        assert [s.sku_id for s in vertex] == ["VTX0-0001"]
        assert [c[0] for c in catalog.calls] == ["ListServices", "ListSkus"]


def test_a_fetch_reads_every_page_spot_and_on_demand_per_region():
    with serve() as (catalog, address):
        table = fetch(address, "USD", deadline_s=5.0)
    skus = [req for method, req in catalog.calls if method == "ListSkus"]
    assert len(skus) == math.ceil(len(COMPUTE) / catalog.max_page_size) > 1
    assert [r.page_token for r in skus] == ["", *(str(4 * i) for i in range(1, len(skus)))]
    assert {(r.parent, r.currency_code) for r in skus} == {("services/6F81-5844-456A", "USD")}
    get = table.get
    assert get("gpu:t4", "on_demand", "us-east1") == (0.35, "")
    assert get("gpu:t4", "spot", "us-central1") == (0.14, "")
    assert get("gpu:t4", "on_demand", "europe-west4") == (0.37, "")
    assert get("gpu:l4", "spot", "us-central1") == (0.22, "")
    assert get("core:n1", "on_demand", "europe-west4") == (0.034806, "")  # the tier from 0
    assert get("ram:n1", "spot", "europe-west4") == (0.000932, "")
    # EUR, GBy.h, commitment, workstation and storage SKUs priced nothing.
    assert get("gpu:t4", "on_demand", "europe-west6")[0] is None
    assert get("ram:n1", "on_demand", "europe-west6")[0] is None
    # 20 SKUs for the Americas' two regions, 6 for the Netherlands, none twice.
    assert len(table.prices) == 20 * 2 + 6 and table.ambiguous == {}


def test_quote_through_the_environment_writes_the_cache_then_uses_it_when_the_catalog_is_gone(
    tmp_path, monkeypatch
):
    cache = tmp_path / "prices.json"
    monkeypatch.setenv("SPOTTRAIN_PRICE_CACHE", str(cache))
    with serve() as (catalog, address):
        monkeypatch.setenv("SPOTTRAIN_CATALOG_ENDPOINT", address)
        q = quote(T4_N1_8)
        assert q.on_demand == pytest.approx(N1_8_T4_ON_DEMAND)
        assert q.source.startswith(f"Cloud Billing Catalog ({address}), fetched ")
        calls = len(catalog.calls)
        quote(Usage("europe-west4-b", "n1-standard-4", "nvidia-tesla-t4", 1))
        assert len(catalog.calls) == calls, "the table is held: no second fetch"
    assert load(cache, address, "USD")[0] is not None
    # The catalog is gone: a new process (memory forgotten) reads the fresh cache.
    quoting.forget()
    q = quote(T4_N1_8)
    assert q.on_demand == pytest.approx(N1_8_T4_ON_DEMAND)
    assert q.source.startswith(f"cache of Cloud Billing Catalog ({address})")
    # Once stale, the catalog is asked again; unreachable, the stale cache still prices.
    quoting.forget()
    sources = Sources.from_env()
    stale = Sources(**{**sources.__dict__, "max_age_s": 0.0, "deadline_s": 2.0})
    q = quote(T4_N1_8, stale)
    assert q.on_demand == pytest.approx(N1_8_T4_ON_DEMAND)
    assert q.source.startswith(f"stale cache of Cloud Billing Catalog ({address})")
    assert "; the catalog: ServiceUnavailable: 503" in q.source


@pytest.fixture(name="closed_port")
def closed_port_fixture():
    """127.0.0.1:<port> refusing connections, held for the test: picked and released,
    another process could listen there meanwhile (tests/ports.py)."""
    with held_port() as port:
        yield f"127.0.0.1:{port}"


def test_an_unreachable_catalog_is_price_unknown_at_once_and_asked_once(tmp_path, closed_port):
    sources = Sources(catalog_endpoint=closed_port, cache_path=tmp_path / "p.json")
    q = quote(T4_N1_8, sources)
    assert (q.spot, q.on_demand) == (None, None)
    assert q.reason.startswith("price unknown: ServiceUnavailable: 503 failed to connect")
    assert "\n" not in q.reason
    # Held for RETRY_AFTER_S: the next quote does not try (and wait) again.
    assert quote(T4_N1_8, sources).reason == q.reason
    assert not (tmp_path / "p.json").exists()


def test_a_catalog_that_does_not_answer_costs_the_deadline_and_no_more(tmp_path):
    deadline = 1.0
    with serve(Catalog(hold=threading.Event())) as (catalog, address):
        sources = Sources(
            catalog_endpoint=address, cache_path=tmp_path / "p.json", deadline_s=deadline
        )
        start = time.monotonic()
        q = quote(T4_N1_8, sources)
        took = time.monotonic() - start
        assert [c[0] for c in catalog.calls] == ["ListServices"]
        assert (q.spot, q.on_demand) == (None, None)
        assert q.reason.startswith("price unknown: the catalog did not answer within 1 s")
        # It waited for the deadline (the call was not refused), and at most the deadline,
        # the thread's hand-over and the in-process work around it.
        assert deadline <= took < deadline + quoting.JOIN_SLACK_S + 1.0
        # The read goes on; once the catalog answers, it holds and caches the prices.
        catalog.hold.set()
        for worker in list(quoting._fetching.values()):
            worker.join(sources.fetch_budget_s)
        q = quote(T4_N1_8, sources)
        assert q.on_demand == pytest.approx(N1_8_T4_ON_DEMAND)
        assert q.source.startswith(f"Cloud Billing Catalog ({address})")
    assert load(tmp_path / "p.json", address, "USD")[0] is not None


def test_a_catalog_that_is_not_one_is_one_line(tmp_path):
    with serve(Catalog(services=[("6F81-5844-456A", "Compute Engine")], skus={})) as (_, address):
        table = fetch(address, "USD", 5.0)
    assert table.prices == {} and isinstance(table, PriceTable)
    with serve(Catalog(services=[])) as (_, address), pytest.raises(CatalogError) as e:
        fetch(address, "USD", 5.0)
    assert str(e.value) == "NotFound: 404 no service 'services/6F81-5844-456A'"
    with serve() as (_, address), pytest.raises(CatalogError) as e:
        fetch(address, "EUR", 5.0)
    assert str(e.value) == "InvalidArgument: 400 the stand-in serves USD only"


def test_importing_spottrain_pricing_loads_no_google_client():
    code = (
        "import sys, spottrain.pricing; "
        "print(sorted(m for m in sys.modules if 'billing' in m or m.startswith('grpc')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _run(args, env, timeout):
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_cli_fills_the_cache_and_quotes_from_it_once_the_catalog_is_gone(tmp_path, closed_port):
    env = {**os.environ, "SPOTTRAIN_PRICE_CACHE": str(tmp_path / "p.json")}
    with serve() as (_, address):
        env["SPOTTRAIN_CATALOG_ENDPOINT"] = address
        out = _run(["-m", "spottrain.pricing", "refresh"], env, 120)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == f"46 unit prices from {address} in {tmp_path / 'p.json'}\n"
    args = ["-m", "spottrain.pricing", "quote", "--location", "us-central1-a"]
    args += ["--machine", "n1-standard-8", "--gpu", "nvidia-tesla-t4", "--count", "1"]
    out = _run(args, env, 120)
    q = json.loads(out.stdout)
    assert q["on_demand"] == pytest.approx(N1_8_T4_ON_DEMAND)
    assert q["source"].startswith(f"cache of Cloud Billing Catalog ({address})")
    env["SPOTTRAIN_CATALOG_ENDPOINT"] = closed_port
    out = _run(["-m", "spottrain.pricing", "refresh"], env, 120)
    assert out.returncode == 1
    assert out.stderr.startswith("python -m spottrain.pricing: error: ServiceUnavailable: 503")
    assert out.stderr.count("\n") == 1


def _client_import_seconds() -> float:
    """How long the read thread's first work, importing the catalog client, takes here now."""
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "from spottrain.pricing.catalog import _client; "
                    "_client('127.0.0.1:1')"], check=True)  # fmt: skip
    return time.monotonic() - began


def test_a_process_is_never_held_at_exit_by_a_read_still_going_on(tmp_path):
    # The quote stops waiting at the deadline; the read goes on in a daemon thread for up
    # to fetch_budget_s (120 s) against a catalog that never answers. The process must
    # still end as soon as its work does: far inside that budget. The deadline lets the
    # read reach the catalog first: its thread imports the gRPC client within it, which
    # two CPU hogs stretched past a fixed 0.5 s (then no read was going on at exit).
    deadline = round(2 * _client_import_seconds() + 0.5, 1)
    code = (
        "from spottrain.pricing import Usage, quote; "
        "print(quote(Usage('us-central1', 'n1-standard-8')).reason)"
    )
    with serve(Catalog(hold=threading.Event())) as (catalog, address):
        env = {**os.environ, "SPOTTRAIN_CATALOG_ENDPOINT": address}
        env.update(
            SPOTTRAIN_PRICE_DEADLINE_S=str(deadline), SPOTTRAIN_PRICE_CACHE=str(tmp_path / "p.json")
        )
        out = _run(["-c", code], env, Sources().fetch_budget_s / 2)
        assert [c[0] for c in catalog.calls] == ["ListServices"]
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        f"price unknown: the catalog did not answer within {deadline:g} s"
    ), out.stdout
