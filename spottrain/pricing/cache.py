"""The price table on disk: one JSON file, written whole, read back only for its catalog.

A run must not wait on the catalog, and the catalog's list prices change rarely: the
table read once is kept with its fetch time and used until it is ``max_age_s`` old, and
after that still, saying so, whenever the catalog cannot be reached.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from spottrain.pricing.skus import PriceTable

__all__ = ["load", "save"]

#: Bumped when the file's shape changes; another version reads as no cache.
VERSION = 1
NO_CACHE = "no cache yet"


def load(path: Path, origin: str, currency: str) -> tuple[PriceTable | None, str]:
    """The table cached at ``path`` for ``origin`` in ``currency``, or ``None`` and why."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, NO_CACHE
    except (OSError, ValueError) as e:
        return None, f"cache {str(path)!r} unreadable ({e})"
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None, f"cache {str(path)!r} is not a version-{VERSION} price cache"
    try:
        table = PriceTable.from_json(data.get("table"))
    except ValueError as e:
        return None, f"cache {str(path)!r} malformed: {e}"
    # A stand-in's prices must never price a real run, nor dollars euros.
    if table.origin != origin or table.currency != currency:
        return None, f"cache holds {table.origin} in {table.currency}"
    return table, ""


def save(path: Path, table: PriceTable) -> str:
    """Writes ``table`` to ``path`` atomically; ``""`` or why it could not."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".prices-", suffix=".json", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": VERSION, "table": table.to_json()}, f, indent=1)
            # Readers see the old file or the new one, never half of one.
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        return f"cannot write the price cache {str(path)!r} ({e})"
    return ""
