"""What one machine was (:class:`Usage`) and its prices per hour (:class:`Quote`).

In a module of their own so that the package's :func:`~spottrain.pricing.quote` and
the catalog reader behind it both import them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


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
