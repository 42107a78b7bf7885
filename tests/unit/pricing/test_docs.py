"""docs/cost.md "Where prices come from": its example and commands are what the code takes."""

from __future__ import annotations

import json

import pytest
from doc_commands import PAGES, blocks, commands

from spottrain.pricing import Usage, quote
from spottrain.pricing.__main__ import main
from spottrain.pricing.sources import Sources, parse_overrides
from spottrain.pricing.sources import __doc__ as sources_doc


def _page() -> str:
    return PAGES["docs/cost.md"]


def test_the_override_example_parses_and_prices_gke_and_vertex():
    (example,) = blocks("json", _page())
    over = parse_overrides(example)
    assert over.get("gce", "gpu:t4", "spot") == 0.14
    assert over.get("vertex", "machine:n1-standard-8", "on_demand") == 0.44
    q = quote(
        Usage("us-central1", "n1-standard-8", "NVIDIA_TESLA_T4", 1, "vertex"),
        Sources.from_env({"SPOTTRAIN_PRICES": example}),
    )
    assert (q.spot, q.on_demand) == (pytest.approx(0.25), pytest.approx(0.84))
    # The module's docstring shows the same shape.
    assert json.loads(sources_doc.split("::", 1)[1].split("\n\n")[1]) == json.loads(example)


def test_the_page_s_commands_run(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SPOTTRAIN_CATALOG_ENDPOINT", "off")
    monkeypatch.setenv("SPOTTRAIN_PRICE_CACHE", str(tmp_path / "none.json"))
    ours = [c for c in commands(_page()) if c[:3] == ["python", "-m", "spottrain.pricing"]]
    assert [c[3] for c in ours] == ["refresh", "quote"]
    assert main(ours[0][3:]) == 1  # the catalog is off here
    assert main(ours[1][3:]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reason"] == "price unknown: the catalog is off and no cache yet"
