"""List prices per hour of what an attempt ran on (issue 34).

The interface the ledger's cost figures use; the Cloud Billing Catalog reader,
its cache and the user's overrides live behind :func:`quote` (docs/cost.md,
"Where prices come from"). Importing this package imports no Google client:
google-cloud-billing (the ``pricing`` extra) is loaded on the first catalog read.
"""

from __future__ import annotations

import logging

from spottrain.pricing.sources import Sources
from spottrain.pricing.terms import Quote, Usage

__all__ = ["Quote", "Sources", "Usage", "quote"]

log = logging.getLogger(__name__)


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
