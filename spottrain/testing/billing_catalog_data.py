"""The SKUs the Cloud Billing Catalog stand-in serves (``billing_catalog.py``).

These are the catalog's *shapes* with illustrative prices, not Google's prices. The
descriptions, categories and units follow what real consumers of the live catalog match
on (skypilot-org/skypilot sky/catalog/data_fetchers/fetch_gcp.py; Google's own billing
export examples name "N1 Predefined Instance Core running in Americas" and "Nvidia Tesla
T4 GPU running in Americas"): GPUs in resource group "GPU", N1 parts in "N1Standard",
other series in "CPU"/"RAM", spot as usage type "Preemptible", prices as
``PricingExpression`` with a ``usage_unit`` of "h" or "GiBy.h" and ``tiered_rates``.
A few SKUs are there to be ignored: a commitment, a workstation GPU, a non-Compute SKU,
one priced in EUR, one in "GBy.h", and a second tier that is not the list price.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SERVICES", "SKUS"]

#: (service_id, display_name); the ids are the catalog's (docs/cost.md cites them).
SERVICES = [
    ("6F81-5844-456A", "Compute Engine"),
    ("95FF-2EF5-5EA1", "Cloud Storage"),
    ("C7E2-9256-1C43", "Vertex AI"),
    ("E000-3F24-B8AA", "Cloud TPU"),
]

_AMERICAS = ["us-central1", "us-east1"]
_NETHERLANDS = ["europe-west4"]


def _sku(
    sku_id: str,
    description: str,
    group: str,
    usage: str,
    regions: list[str],
    price: float,
    unit: str = "h",
    *,
    family: str = "Compute",
    currency: str = "USD",
    tiers: list[tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """One SKU as the keyword arguments of ``billing_v1.Sku``."""
    rates = tiers or [(0.0, price)]
    return {
        "name": f"services/6F81-5844-456A/skus/{sku_id}",
        "sku_id": sku_id,
        "description": description,
        "category": {
            "service_display_name": "Compute Engine",
            "resource_family": family,
            "resource_group": group,
            "usage_type": usage,
        },
        "service_regions": regions,
        "service_provider_name": "Google",
        "pricing_info": [
            {
                "summary": "",
                "pricing_expression": {
                    "usage_unit": unit,
                    "display_quantity": 1,
                    "base_unit": "s" if unit == "h" else "By.s",
                    "base_unit_conversion_factor": 3600 if unit == "h" else 3600 * 2**30,
                    "tiered_rates": [
                        {
                            "start_usage_amount": start,
                            "unit_price": {
                                "currency_code": currency,
                                "units": int(p),
                                "nanos": round((p - int(p)) * 1e9),
                            },
                        }
                        for start, p in rates
                    ],
                },
                "currency_conversion_rate": 1,
            }
        ],
    }


# fmt: off
COMPUTE = [
    # GPUs, per GPU-hour.
    _sku("T4A0-0001", "Nvidia Tesla T4 GPU running in Americas", "GPU", "OnDemand", _AMERICAS, 0.35),  # noqa: E501
    _sku("T4A0-0002", "Spot Preemptible Nvidia Tesla T4 GPU running in Americas", "GPU", "Preemptible", _AMERICAS, 0.14),  # noqa: E501
    _sku("T4N0-0001", "Nvidia Tesla T4 GPU running in Netherlands", "GPU", "OnDemand", _NETHERLANDS, 0.37),  # noqa: E501
    _sku("T4N0-0002", "Spot Preemptible Nvidia Tesla T4 GPU running in Netherlands", "GPU", "Preemptible", _NETHERLANDS, 0.15),  # noqa: E501
    _sku("L4A0-0001", "Nvidia L4 GPU running in Americas", "GPU", "OnDemand", _AMERICAS, 0.56),
    _sku("L4A0-0002", "Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas", "GPU", "Preemptible", _AMERICAS, 0.22),  # noqa: E501
    _sku("A1A0-0001", "Nvidia Tesla A100 GPU running in Americas", "GPU", "OnDemand", _AMERICAS, 2.93),  # noqa: E501
    _sku("A1A0-0002", "Spot Preemptible Nvidia Tesla A100 GPU running in Americas", "GPU", "Preemptible", _AMERICAS, 1.17),  # noqa: E501
    _sku("A8A0-0001", "Nvidia Tesla A100 80GB GPU running in Americas", "GPU", "OnDemand", _AMERICAS, 3.93),  # noqa: E501
    _sku("A8A0-0002", "Spot Preemptible Nvidia Tesla A100 80GB GPU running in Americas", "GPU", "Preemptible", _AMERICAS, 1.57),  # noqa: E501
    # N1 cores (per vCPU-hour) and RAM (per GiB-hour).
    _sku("N1CA-0001", "N1 Predefined Instance Core running in Americas", "N1Standard", "OnDemand", _AMERICAS, 0.031611),  # noqa: E501
    _sku("N1CA-0002", "Spot Preemptible N1 Predefined Instance Core running in Americas", "N1Standard", "Preemptible", _AMERICAS, 0.00632),  # noqa: E501
    _sku("N1RA-0001", "N1 Predefined Instance Ram running in Americas", "N1Standard", "OnDemand", _AMERICAS, 0.004237, "GiBy.h"),  # noqa: E501
    _sku("N1RA-0002", "Spot Preemptible N1 Predefined Instance Ram running in Americas", "N1Standard", "Preemptible", _AMERICAS, 0.000847, "GiBy.h"),  # noqa: E501
    # The Netherlands' on-demand core price has a second tier: the first (from 0) is the list price.  # noqa: E501
    _sku("N1CN-0001", "N1 Predefined Instance Core running in Netherlands", "N1Standard", "OnDemand", _NETHERLANDS, 0, tiers=[(0.0, 0.034806), (744.0, 0.0244)]),  # noqa: E501
    _sku("N1CN-0002", "Spot Preemptible N1 Predefined Instance Core running in Netherlands", "N1Standard", "Preemptible", _NETHERLANDS, 0.00696),  # noqa: E501
    _sku("N1RN-0001", "N1 Predefined Instance Ram running in Netherlands", "N1Standard", "OnDemand", _NETHERLANDS, 0.004664, "GiBy.h"),  # noqa: E501
    _sku("N1RN-0002", "Spot Preemptible N1 Predefined Instance Ram running in Netherlands", "N1Standard", "Preemptible", _NETHERLANDS, 0.000932, "GiBy.h"),  # noqa: E501
    # G2 (L4 machines) and A2 (A100 machines) cores and RAM.
    _sku("G2CA-0001", "G2 Instance Core running in Americas", "CPU", "OnDemand", _AMERICAS, 0.02495),  # noqa: E501
    _sku("G2CA-0002", "Spot Preemptible G2 Instance Core running in Americas", "CPU", "Preemptible", _AMERICAS, 0.00998),  # noqa: E501
    _sku("G2RA-0001", "G2 Instance Ram running in Americas", "RAM", "OnDemand", _AMERICAS, 0.002923, "GiBy.h"),  # noqa: E501
    _sku("G2RA-0002", "Spot Preemptible G2 Instance Ram running in Americas", "RAM", "Preemptible", _AMERICAS, 0.001169, "GiBy.h"),  # noqa: E501
    _sku("A2CA-0001", "A2 Instance Core running in Americas", "CPU", "OnDemand", _AMERICAS, 0.031611),  # noqa: E501
    _sku("A2CA-0002", "Spot Preemptible A2 Instance Core running in Americas", "CPU", "Preemptible", _AMERICAS, 0.012644),  # noqa: E501
    _sku("A2RA-0001", "A2 Instance Ram running in Americas", "RAM", "OnDemand", _AMERICAS, 0.004237, "GiBy.h"),  # noqa: E501
    _sku("A2RA-0002", "Spot Preemptible A2 Instance Ram running in Americas", "RAM", "Preemptible", _AMERICAS, 0.001695, "GiBy.h"),  # noqa: E501
    # To be ignored: a commitment, a workstation card, storage, EUR, GBy.h.
    _sku("IGN0-0001", "Commitment v1: Nvidia Tesla T4 GPU running in Americas for 1 Year", "GPU", "Commit1Yr", _AMERICAS, 0.22),  # noqa: E501
    _sku("IGN0-0002", "Nvidia Tesla T4 Virtual Workstation GPU running in Americas", "GPU", "OnDemand", _AMERICAS, 0.55),  # noqa: E501
    _sku("IGN0-0003", "Storage PD Capacity", "PDStandard", "OnDemand", _AMERICAS, 0.04, "GiBy.mo", family="Storage"),  # noqa: E501
    _sku("IGN0-0004", "Nvidia Tesla T4 GPU running in Zurich", "GPU", "OnDemand", ["europe-west6"], 0.41, currency="EUR"),  # noqa: E501
    _sku("IGN0-0005", "N1 Predefined Instance Ram running in Zurich", "N1Standard", "OnDemand", ["europe-west6"], 0.0051, "GBy.h"),  # noqa: E501
]
# fmt: on

# One illustrative Vertex AI SKU so that ListSkus answers for that service too; its
# description is made up (spottrain does not read Vertex AI's SKUs: docs/cost.md).
VERTEX = [
    {
        **_sku(
            "VTX0-0001",
            "Illustrative Vertex AI training SKU (not a real description)",
            "GPU",
            "OnDemand",
            _AMERICAS,
            0.40,
        ),
        "name": "services/C7E2-9256-1C43/skus/VTX0-0001",
        "category": {
            "service_display_name": "Vertex AI",
            "resource_family": "Compute",
            "resource_group": "GPU",
            "usage_type": "OnDemand",
        },
    }
]

#: service id → its SKUs (``billing_v1.Sku`` keyword arguments).
SKUS: dict[str, list[dict[str, Any]]] = {"6F81-5844-456A": COMPUTE, "C7E2-9256-1C43": VERTEX}
