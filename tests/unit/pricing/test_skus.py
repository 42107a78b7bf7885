"""SKU matching on the catalog's own message types (google-cloud-billing's billing_v1)."""

from __future__ import annotations

import pytest
from google.cloud import billing_v1

from spottrain.pricing.skus import PriceTable, rate_of
from spottrain.testing.billing_catalog_data import COMPUTE


def sku(
    description,
    price=0.35,
    *,
    group="GPU",
    usage="OnDemand",
    regions=("us-central1",),
    unit="h",
    currency="USD",
    family="Compute",
    tiers=None,
    sku_id="AAAA-BBBB-CCCC",
    history=(),
):
    def info(p, rates):
        return billing_v1.PricingInfo(
            pricing_expression=billing_v1.PricingExpression(
                usage_unit=unit,
                tiered_rates=[
                    billing_v1.PricingExpression.TierRate(
                        start_usage_amount=start,
                        unit_price={
                            "currency_code": currency,
                            "units": int(v),
                            "nanos": round((v - int(v)) * 1e9),
                        },
                    )
                    for start, v in (rates or [(0, p)])
                ],
            )
        )

    return billing_v1.Sku(
        sku_id=sku_id,
        description=description,
        category=billing_v1.Category(
            service_display_name="Compute Engine",
            resource_family=family,
            resource_group=group,
            usage_type=usage,
        ),
        service_regions=list(regions),
        pricing_info=[info(p, None) for p in history] + [info(price, tiers)],
    )


@pytest.mark.parametrize(
    "description, group, usage, part, side",
    [
        ("Nvidia Tesla T4 GPU running in Americas", "GPU", "OnDemand", "gpu:t4", "on_demand"),
        (
            "Spot Preemptible Nvidia Tesla T4 GPU running in Americas",
            "GPU",
            "Preemptible",
            "gpu:t4",
            "spot",
        ),
        (
            "Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas",
            "GPU",
            "Preemptible",
            "gpu:l4",
            "spot",
        ),
        (
            "Nvidia Tesla A100 GPU running in Americas",
            "GPU",
            "OnDemand",
            "gpu:a100-40gb",
            "on_demand",
        ),
        (
            "Nvidia Tesla A100 80GB GPU running in EMEA",
            "GPU",
            "OnDemand",
            "gpu:a100-80gb",
            "on_demand",
        ),
        (
            "Nvidia H100 80GB GPU running in Americas",
            "GPU",
            "OnDemand",
            "gpu:h100-80gb",
            "on_demand",
        ),
        (
            "N1 Predefined Instance Core running in Americas",
            "N1Standard",
            "OnDemand",
            "core:n1",
            "on_demand",
        ),
        (
            "Spot Preemptible N1 Predefined Instance Ram running in Americas",
            "N1Standard",
            "Preemptible",
            "ram:n1",
            "spot",
        ),
        ("G2 Instance Core running in Iowa", "CPU", "OnDemand", "core:g2", "on_demand"),
        ("A2 Instance Ram running in Hong Kong", "RAM", "OnDemand", "ram:a2", "on_demand"),
    ],
)
def test_the_catalog_descriptions_match_their_part(description, group, usage, part, side):
    unit = "GiBy.h" if part.startswith("ram:") else "h"
    rate, why = rate_of(sku(description, 0.5, group=group, usage=usage, unit=unit))
    assert why == "" and rate is not None
    assert (rate.part, rate.usage, rate.price, rate.regions) == (part, side, 0.5, ("us-central1",))


@pytest.mark.parametrize(
    "kwargs, why",
    [
        ({"description": "Commitment v1: Nvidia Tesla T4 GPU running in Americas for 1 Year",
          "usage": "Commit1Yr"}, "usage type 'Commit1Yr'"),
        ({"description": "Nvidia Tesla T4 Virtual Workstation GPU running in Americas"},
         "not a part spottrain prices"),
        ({"description": "Reserved Nvidia H100 80GB GPU running in Americas"},
         "not a part spottrain prices"),
        ({"description": "N1 Custom Instance Core running in Americas", "group": "N1Standard"},
         "not a part spottrain prices"),
        ({"description": "Nvidia Tesla T4 GPU running in Zurich", "currency": "EUR"},
         "currency 'EUR', not 'USD'"),
        ({"description": "N1 Predefined Instance Ram running in Zurich", "group": "N1Standard",
          "unit": "GBy.h"}, "unit 'GBy.h', not 'GiBy.h'"),
        ({"description": "Storage PD Capacity", "family": "Storage"}, "not Compute"),
        ({"description": "Nvidia Tesla T4 GPU running in Americas", "tiers": [(10, 0.3)]},
         "no tier starting at 0"),
    ],
)  # fmt: skip
def test_what_does_not_fit_is_skipped_saying_why(kwargs, why):
    assert rate_of(sku(**kwargs)) == (None, why)


def test_the_list_price_is_the_tier_from_zero_and_the_newest_pricing_info():
    rate, _ = rate_of(sku("Nvidia Tesla T4 GPU running in Americas", tiers=[(0, 0.35), (744, 0.2)]))
    assert rate.price == 0.35
    rate, _ = rate_of(sku("Nvidia Tesla T4 GPU running in Americas", 0.40, history=(0.30, 0.35)))
    assert rate.price == 0.40  # pricing_info is chronological: the last is the price now
    rate, _ = rate_of(sku("Nvidia Tesla T4 GPU running in Americas", 12.345678901))
    assert rate.price == pytest.approx(12.345678901)  # Money units + nanos


def test_skus_that_disagree_leave_the_price_unknown_naming_both():
    table = PriceTable()
    for s in (
        sku("Nvidia Tesla T4 GPU running in Americas", 0.35, regions=("us-central1", "us-east1")),
        sku("Nvidia Tesla T4 GPU running in Iowa", 0.35, sku_id="SAME-PRICE-0001"),
        sku("Nvidia Tesla T4 GPU running in Virginia", 0.40, regions=("us-east1",), sku_id="XX"),
    ):
        table.add(rate_of(s)[0])
    assert table.get("gpu:t4", "on_demand", "us-central1") == (0.35, "")
    price, why = table.get("gpu:t4", "on_demand", "us-east1")
    assert (
        price is None
        and "AAAA-BBBB-CCCC" in why
        and "XX 'Nvidia Tesla T4 GPU running in Virginia'" in why
    )
    assert table.get("gpu:t4", "spot", "us-central1") == (
        None,
        "no spot SKU for gpu:t4 in us-central1",
    )


def test_the_table_survives_json_and_refuses_a_malformed_one():
    table = PriceTable(origin="o", fetched_at=5.0)
    table.add(rate_of(sku("Nvidia L4 GPU running in Americas", 0.56))[0])
    assert PriceTable.from_json(table.to_json()) == table
    with pytest.raises(ValueError, match="'prices' is not an object of numbers"):
        PriceTable.from_json({"fetched_at": 1, "prices": {"k": "cheap"}})
    with pytest.raises(ValueError, match="'fetched_at' is None"):
        PriceTable.from_json({"prices": {}})


def test_the_stand_in_data_parses_except_the_skus_there_to_be_ignored():
    ignored = []
    for kwargs in COMPUTE:
        rate, why = rate_of(billing_v1.Sku(**kwargs))
        if rate is None:
            ignored.append(kwargs["sku_id"])
    assert sorted(ignored) == [f"IGN0-000{i}" for i in range(1, 6)]
