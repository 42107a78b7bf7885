"""Cloud Billing Catalog SKUs → unit prices per hour, per region, spot and on-demand.

The SKU's shape is the API's own (google-cloud-billing, billing_v1/types/cloud_catalog.py):
``Sku.description``, ``Sku.category`` (``resource_family`` "Compute", ``resource_group``
"GPU" / "N1Standard" / "CPU" / "RAM", ``usage_type`` "OnDemand" / "Preemptible" /
"Commit1Yr"…), ``Sku.service_regions`` and ``Sku.pricing_info[].pricing_expression``
(``usage_unit``, ``tiered_rates[].start_usage_amount`` and ``.unit_price``, a
``google.type.Money``). Matching follows SkyPilot's fetcher, which reads the live
catalog (skypilot-org/skypilot sky/catalog/data_fetchers/fetch_gcp.py: ``get_skus``
drops non-Compute, commitment, custom, premium, reserved and sole-tenancy SKUs;
``get_vm_price`` picks the series by its description words and spot by
``usageType == 'Preemptible'``; ``get_gpu_price`` picks the card by "<name> GPU" in the
description, "A100 80GB GPU" and "H100 80GB GPU" for the 80 GB cards).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PriceTable", "Rate", "rate_of"]

#: usage_type → our side of the quote; commitments ("Commit1Yr"…) are neither.
USAGE = {"OnDemand": "on_demand", "Preemptible": "spot"}

# A card's words in the description; \b keeps "A100 GPU" from matching "A100 80GB GPU".
_GPU_WORDS = {
    "t4": r"\bT4 GPU\b",
    "l4": r"\bL4 GPU\b",
    "a100-40gb": r"\bA100 GPU\b",
    "a100-80gb": r"\bA100 80GB GPU\b",
    "h100-80gb": r"\bH100 80GB GPU\b",
    "v100": r"\bV100 GPU\b",
    "p100": r"\bP100 GPU\b",
    "p4": r"\bP4 GPU\b",
}
# A series' core and RAM SKUs (SkyPilot's SERIES_TO_DESCRIPTION): "N1 Predefined
# Instance Core running in Americas", "Spot Preemptible G2 Instance Ram running in Iowa".
_SERIES_WORDS = {
    "n1": "N1 Predefined Instance",
    "g2": "G2 Instance",
    "a2": "A2 Instance",
    "a3": "A3 Instance",
}
_GPU = {k: re.compile(v, re.I) for k, v in _GPU_WORDS.items()}
_SERIES = {k: re.compile(rf"\b{re.escape(v)} (Core|Ram)\b", re.I) for k, v in _SERIES_WORDS.items()}
# Variants priced differently from a plain VM's part, or not at all like one.
_EXCLUDED = re.compile(
    r"custom|premium|reserved|sole tenan|commitment|workstation|dws|calendar|flex|confidential",
    re.I,
)
#: The unit each kind of part must be priced in (PricingExpression.usage_unit).
UNITS = {"gpu": "h", "core": "h", "ram": "GiBy.h"}


@dataclass(frozen=True)
class Rate:
    """One SKU's list price per unit-hour.

    Attributes:
        part: ``gpu:<key>``, ``core:<series>`` or ``ram:<series>``.
        usage: ``spot`` or ``on_demand``.
        price: Per hour (per GPU, per vCPU, per GiB of RAM).
        regions: ``Sku.service_regions``.
        sku: ``Sku.sku_id`` and description, for the reader.
    """

    part: str
    usage: str
    price: float
    regions: tuple[str, ...]
    sku: str


def _part(description: str, resource_group: str) -> str | None:
    if _EXCLUDED.search(description):
        return None
    if resource_group == "GPU":
        hits = [k for k, rx in _GPU.items() if rx.search(description)]
        return f"gpu:{hits[0]}" if len(hits) == 1 else None
    for series, rx in _SERIES.items():
        if m := rx.search(description):
            return f"{'core' if m.group(1).lower() == 'core' else 'ram'}:{series}"
    return None


def rate_of(sku: Any, currency: str = "USD") -> tuple[Rate | None, str]:
    """The rate a ``billing_v1.Sku`` gives, or ``None`` and why it does not fit."""
    cat = sku.category
    if cat.resource_family != "Compute":
        return None, "not Compute"
    usage = USAGE.get(cat.usage_type)
    if usage is None:
        return None, f"usage type {cat.usage_type!r}"
    part = _part(sku.description, cat.resource_group)
    if part is None:
        return None, "not a part spottrain prices"
    if not sku.pricing_info:
        return None, "no pricing_info"
    # "A timeline of pricing info for this SKU in chronological order" (Sku.pricing_info):
    # the last entry is the price now.
    expr = sku.pricing_info[-1].pricing_expression
    unit = UNITS[part.split(":", 1)[0]]
    if expr.usage_unit != unit:
        return None, f"unit {expr.usage_unit!r}, not {unit!r}"
    # Tiered rates apply by usage amount ("Usage is priced at this rate only after this
    # amount", TierRate.start_usage_amount): a list price per hour is the tier that starts
    # at 0, the rate for the first hours; later tiers are volume prices, not the list price.
    first = [t for t in expr.tiered_rates if t.start_usage_amount == 0]
    if not first:
        return None, "no tier starting at 0"
    money = first[0].unit_price
    if money.currency_code != currency:
        return None, f"currency {money.currency_code!r}, not {currency!r}"
    price = money.units + money.nanos / 1e9
    regions = tuple(sku.service_regions)
    return Rate(part, usage, price, regions, f"{sku.sku_id} {sku.description!r}"), ""


@dataclass
class PriceTable:
    """Unit prices by (part, usage, region), as read from the catalog at ``fetched_at``.

    Two SKUs that price the same part, usage and region differently leave it unknown
    (``ambiguous``): a confidently wrong price is worse than none.
    """

    currency: str = "USD"
    fetched_at: float = field(default_factory=time.time)
    origin: str = ""
    prices: dict[str, float] = field(default_factory=dict)
    skus: dict[str, str] = field(default_factory=dict)
    ambiguous: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def key(part: str, usage: str, region: str) -> str:
        """The table's key for one price."""
        return f"{part}|{usage}|{region}"

    def add(self, rate: Rate) -> None:
        """Enters ``rate`` for each of its regions."""
        for region in rate.regions:
            k = self.key(rate.part, rate.usage, region)
            if k in self.ambiguous:
                self.ambiguous[k] += f", {rate.sku}"
            elif k in self.prices and abs(self.prices[k] - rate.price) > 1e-12:
                self.ambiguous[k] = f"{self.skus.pop(k)}, {rate.sku}"
                del self.prices[k]
            else:
                self.prices[k] = rate.price
                self.skus[k] = rate.sku

    def get(self, part: str, usage: str, region: str) -> tuple[float | None, str]:
        """The unit price, or ``None`` and one line saying why."""
        k = self.key(part, usage, region)
        if k in self.prices:
            return self.prices[k], ""
        if k in self.ambiguous:
            return None, f"SKUs disagree on {part} {usage} in {region}: {self.ambiguous[k]}"
        return None, f"no {usage.replace('_', '-')} SKU for {part} in {region}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (the cache file's content)."""
        return {
            "currency": self.currency,
            "fetched_at": self.fetched_at,
            "origin": self.origin,
            "prices": self.prices,
            "skus": self.skus,
            "ambiguous": self.ambiguous,
        }

    @classmethod
    def from_json(cls, data: Any) -> PriceTable:
        """Reads ``to_json``'s dict back.

        Raises:
            ValueError: ``data`` is not such a dict, naming the first bad field.
        """
        if not isinstance(data, dict):
            raise ValueError(f"not an object but {type(data).__name__}")
        prices = data.get("prices")
        if not isinstance(prices, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in prices.values()
        ):
            raise ValueError("'prices' is not an object of numbers")
        fetched_at = data.get("fetched_at")
        if not isinstance(fetched_at, (int, float)):
            raise ValueError(f"'fetched_at' is {fetched_at!r}, not a time")
        return cls(
            currency=str(data.get("currency", "USD")),
            fetched_at=float(fetched_at),
            origin=str(data.get("origin", "")),
            prices={str(k): float(v) for k, v in prices.items()},
            skus={str(k): str(v) for k, v in dict(data.get("skus") or {}).items()},
            ambiguous={str(k): str(v) for k, v in dict(data.get("ambiguous") or {}).items()},
        )
