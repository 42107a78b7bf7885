"""List prices per hour of what an attempt ran on (issue 34).

The interface the ledger's cost figures use; the Cloud Billing Catalog reader,
its cache and the user's overrides live behind :func:`quote` (docs/cost.md,
"Where prices come from"). Importing this package imports no Google client:
google-cloud-billing (the ``pricing`` extra) is loaded on the first catalog read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from spottrain.pricing.sources import Sources

__all__ = ["Quote", "Sources", "Usage", "quote"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Usage:
    """What one machine of an attempt was (one replica; the ledger multiplies).

    Attributes:
        location: Region or zone (``us-central1`` or ``us-central1-a``).
        machine_type: ``n1-standard-8``, ``g2-standard-8``…; ``""`` when unknown.
        gpu_type: GKE's accelerator label (``nvidia-tesla-t4``) or Vertex's
            (``NVIDIA_TESLA_T4``); ``""`` for none.
        gpu_count: GPUs on that machine.
        platform: ``gce`` (GKE nodes, Compute Engine SKUs) or ``vertex`` (Vertex AI
            custom training, billed under Vertex AI's own SKUs).
    """

    location: str = ""
    machine_type: str = ""
    gpu_type: str = ""
    gpu_count: int = 0
    platform: str = "gce"


@dataclass(frozen=True)
class Quote:
    """Prices per hour of one machine (with its GPUs); ``None``: unknown, see ``reason``."""

    spot: float | None
    on_demand: float | None
    currency: str = "USD"
    source: str = ""
    reason: str = ""


def quote(usage: Usage, sources: Sources | None = None) -> Quote:
    """The spot and on-demand prices per hour of ``usage`` (never raises).

    Args:
        usage: The machine.
        sources: Where to look; ``None``: :meth:`Sources.from_env`.
    """
    try:
        from spottrain.pricing.quoting import price

        return price(usage, Sources.from_env() if sources is None else sources)
    except Exception as e:  # prices must never fail a run
        line = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        log.warning("price unknown: %s", line)
        return Quote(None, None, reason=f"price unknown: {line}")
