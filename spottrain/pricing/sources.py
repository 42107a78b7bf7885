"""Where prices come from: the user's overrides, the catalog's address, the cache, the deadline.

Everything here is read from the environment by :meth:`Sources.from_env`, which never
raises: a bad value is one line (logged, and in the quote's ``reason`` where it matters).

``SPOTTRAIN_PRICES`` (a JSON file's path, or the JSON itself) gives contract prices per
hour; they win over the catalog's list prices::

    {
      "currency": "USD",
      "gpu": {"nvidia-tesla-t4": {"spot": 0.14, "on_demand": 0.35}},
      "machine": {"n1-standard-8": {"spot": 0.08, "on_demand": 0.38}},
      "vertex": {
        "gpu": {"NVIDIA_TESLA_T4": {"spot": 0.16, "on_demand": 0.40}},
        "machine": {"n1-standard-8": {"spot": 0.09, "on_demand": 0.44}}
      }
    }

``gpu`` is per GPU, ``machine`` is the machine type without its GPUs (its cores and RAM);
the top level is for GKE nodes (Compute Engine), ``vertex`` for Vertex AI custom jobs.
Either side of an entry may be left out.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spottrain.pricing.machines import gpu_key

__all__ = ["Overrides", "Sources", "parse_overrides"]

log = logging.getLogger(__name__)

PRICES_ENV = "SPOTTRAIN_PRICES"
ENDPOINT_ENV = "SPOTTRAIN_CATALOG_ENDPOINT"
CACHE_ENV = "SPOTTRAIN_PRICE_CACHE"
DEADLINE_ENV = "SPOTTRAIN_PRICE_DEADLINE_S"
#: ``SPOTTRAIN_CATALOG_ENDPOINT=off``: never call a catalog (cache and overrides only).
OFF = "off"
DEFAULT_DEADLINE_S = 5.0
DEFAULT_FETCH_BUDGET_S = 120.0
#: A cached table older than this is fetched again, and still used if that fails.
DEFAULT_MAX_AGE_S = 7 * 24 * 3600.0
SIDES = ("spot", "on_demand")


@dataclass(frozen=True)
class Overrides:
    """``SPOTTRAIN_PRICES`` parsed: platform → part (``gpu:t4``, ``machine:<type>``) → side."""

    currency: str = "USD"
    gce: dict[str, dict[str, float]] = field(default_factory=dict)
    vertex: dict[str, dict[str, float]] = field(default_factory=dict)

    def get(self, platform: str, part: str, side: str) -> float | None:
        """The overriding price of ``part`` on ``platform``'s ``side``, if given."""
        table = self.vertex if platform == "vertex" else self.gce
        return table.get(part, {}).get(side)


def _prices_of(section: Any, where: str) -> dict[str, dict[str, float]]:
    if not isinstance(section, dict):
        raise ValueError(f"{where} is {section!r}, not an object")
    out: dict[str, dict[str, float]] = {}
    for kind in section:
        if kind not in ("gpu", "machine") and not (
            where == "the top level" and kind in ("currency", "vertex")
        ):
            raise ValueError(f"{where} has {kind!r}; expected 'gpu' and 'machine'")
    for kind in ("gpu", "machine"):
        entries = section.get(kind, {})
        if not isinstance(entries, dict):
            raise ValueError(f"{kind!r} is {entries!r}, not an object")
        for name, sides in entries.items():
            if kind == "gpu":
                key = gpu_key(str(name))
                if key is None:
                    raise ValueError(f"gpu {name!r} is not a GPU spottrain knows")
            else:
                key = str(name).strip().lower()
            if not isinstance(sides, dict) or not sides:
                raise ValueError(f"{kind}.{name} is {sides!r}, not an object of 'spot'/'on_demand'")
            part = out.setdefault(f"{kind}:{key}", {})
            for side, value in sides.items():
                if side not in SIDES:
                    raise ValueError(f"{kind}.{name} has {side!r}; expected 'spot' or 'on_demand'")
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
                if not ok or not math.isfinite(value) or value < 0:
                    raise ValueError(f"{kind}.{name}.{side} is {value!r}, not a number >= 0")
                part[side] = float(value)
    return out


def parse_overrides(text: str) -> Overrides:
    """``SPOTTRAIN_PRICES``' value (a path, or inline JSON) → :class:`Overrides`.

    Raises:
        ValueError: one line naming the bad value.
    """
    raw = text.strip()
    if not raw.startswith(("{", "[")):  # a path; JSON inline otherwise
        if "\n" in raw or ": " in raw:  # YAML, say, read as a file name before
            raise ValueError(
                f"{raw[:40]!r}... is neither JSON (it starts with '{{') nor a file's path"
            )
        path = Path(raw).expanduser()
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ValueError(f"cannot read {str(path)!r} ({e.strerror or e})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"is {data!r}, not a JSON object")
    currency = data.get("currency", "USD")
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isalpha():
        raise ValueError(f"currency {currency!r} is not an ISO 4217 code")
    gce = _prices_of(data, "the top level")
    vertex = _prices_of(data["vertex"], "'vertex'") if "vertex" in data else {}
    return Overrides(currency.upper(), gce, vertex)


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spottrain" / "prices.json"


@dataclass(frozen=True)
class Sources:
    """Where :func:`spottrain.pricing.quote` looks.

    Attributes:
        overrides: ``SPOTTRAIN_PRICES`` parsed; ``None`` when unset or bad.
        overrides_error: Why ``SPOTTRAIN_PRICES`` is bad (no price is given then).
        catalog_endpoint: ``host:port`` of a catalog; ``""``: Google's; ``"off"``: none.
        cache_path: The JSON cache of the catalog's prices.
        deadline_s: The most a quote waits on the catalog (all its calls together).
        fetch_budget_s: The most one read of the catalog may take in the background,
            where it goes on after a quote stopped waiting, to hold and cache the prices.
        max_age_s: A cache older than this is refreshed (and used if that fails).
        currency: The currency asked of the catalog.
    """

    overrides: Overrides | None = None
    overrides_error: str = ""
    catalog_endpoint: str = ""
    cache_path: Path = field(default_factory=_default_cache)
    deadline_s: float = DEFAULT_DEADLINE_S
    fetch_budget_s: float = DEFAULT_FETCH_BUDGET_S
    max_age_s: float = DEFAULT_MAX_AGE_S
    currency: str = "USD"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Sources:
        """Reads the ``SPOTTRAIN_*`` variables (``env`` or ``os.environ``); never raises."""
        env = os.environ if env is None else env
        overrides, error = None, ""
        if text := env.get(PRICES_ENV, "").strip():
            try:
                overrides = parse_overrides(text)
            except ValueError as e:
                error = f"{PRICES_ENV} {e}"
                log.warning("%s; no price is given while it is set", error)
        deadline = DEFAULT_DEADLINE_S
        if text := env.get(DEADLINE_ENV, "").strip():
            try:
                deadline = float(text)
                if not math.isfinite(deadline) or deadline <= 0:
                    raise ValueError
            except ValueError:
                deadline = DEFAULT_DEADLINE_S
                log.warning(
                    "%s=%r is not a number of seconds > 0; using %s", DEADLINE_ENV, text, deadline
                )
        cache = env.get(CACHE_ENV, "").strip()
        endpoint = env.get(ENDPOINT_ENV, "").strip()
        return cls(
            overrides=overrides,
            overrides_error=error,
            catalog_endpoint=OFF if endpoint.lower() == OFF else endpoint,
            cache_path=Path(cache).expanduser() if cache else _default_cache(),
            deadline_s=deadline,
            currency=overrides.currency if overrides else "USD",
        )
