"""One machine's price per hour from its parts: overrides first, then the catalog's table.

The table comes from this process's memory, else the cache while fresh, else the
catalog within the deadline (the fetch goes on in a daemon thread after the deadline and
fills the cache for later), else the stale cache, saying so. Nothing here raises.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import logging
import threading
import time
from dataclasses import dataclass

from spottrain.pricing import cache, catalog, zones
from spottrain.pricing.machines import gpu_key, problem, region_of, shape
from spottrain.pricing.skus import PriceTable
from spottrain.pricing.sources import OFF, SIDES, Sources
from spottrain.pricing.terms import Quote, Usage

__all__ = ["forget", "price", "table_for"]

log = logging.getLogger(__name__)

#: After a failed fetch, this process uses what it has for this long before asking again,
#: so one unreachable catalog costs one deadline, not one per quote.
RETRY_AFTER_S = 600.0
#: What quote() may wait past the deadline for the fetch thread to hand its result over.
JOIN_SLACK_S = 0.5
VERTEX_CAVEAT = (
    "Vertex AI prices are not read from the catalog (the shapes of its custom-training "
    "SKUs are not confirmed), and a Compute Engine price is not Vertex AI's; "
    'give them in SPOTTRAIN_PRICES\' "vertex" section'
)


@dataclass
class _Held:
    table: PriceTable | None
    source: str
    reason: str
    checked: float


_lock = threading.Lock()
_held: dict[tuple[str, str, str], _Held] = {}
_fetching: dict[tuple[str, str, str], threading.Thread] = {}


def forget() -> None:
    """Drops what this process holds (tests; a changed environment)."""
    with _lock:
        _held.clear()


def _installed() -> bool:
    try:
        return importlib.util.find_spec("google.cloud.billing_v1") is not None
    except ImportError:  # no google.cloud at all
        return False


def _stamp(table: PriceTable) -> str:
    when = dt.datetime.fromtimestamp(table.fetched_at, dt.timezone.utc)
    return f"Cloud Billing Catalog ({table.origin}), fetched {when:%Y-%m-%dT%H:%MZ}"


def _fetch_into(key: tuple[str, str, str], sources: Sources, box: dict) -> None:
    try:
        table = catalog.fetch(
            sources.catalog_endpoint,
            sources.currency,
            max(sources.deadline_s, sources.fetch_budget_s),
        )
    except catalog.CatalogError as e:
        box["error"] = str(e)
        return
    if why := cache.save(sources.cache_path, table):
        log.warning("%s", why)
    with _lock:
        _held[key] = _Held(table, _stamp(table), "", time.monotonic())


def table_for(sources: Sources) -> tuple[PriceTable | None, str, str]:
    """The price table to use now, where it came from, and why there is none."""
    origin = catalog.origin_of(sources.catalog_endpoint)
    key = (origin, sources.currency, str(sources.cache_path))
    now = time.time()
    with _lock:
        held = _held.get(key)
    fresh = held is not None and held.table is not None
    fresh = fresh and now - held.table.fetched_at < sources.max_age_s
    if held is not None and (fresh or time.monotonic() - held.checked < RETRY_AFTER_S):
        return held.table, held.source, held.reason
    cached, why_not = cache.load(sources.cache_path, origin, sources.currency)
    if cached is not None and now - cached.fetched_at < sources.max_age_s:
        result = _Held(cached, f"cache of {_stamp(cached)}", "", time.monotonic())
    elif sources.catalog_endpoint == OFF:
        stale = f"stale cache of {_stamp(cached)}" if cached else ""
        result = _Held(
            cached,
            stale,
            f"the catalog is off and {why_not or 'the cache is stale'}",
            time.monotonic(),
        )
    elif not _installed():
        result = _Held(cached, "", "google-cloud-billing is not installed", time.monotonic())
        if cached is not None:
            result.source = (
                f"stale cache of {_stamp(cached)}; google-cloud-billing is not installed"
            )
            result.reason = ""
    else:
        box: dict = {}
        with _lock:
            worker = _fetching.get(key)
            if worker is None or not worker.is_alive():
                worker = threading.Thread(
                    target=_fetch_into,
                    args=(key, sources, box),
                    name="spottrain-prices",
                    daemon=True,
                )
                _fetching[key] = worker
                worker.start()
        # A quote waits deadline_s; the read goes on in the thread up to fetch_budget_s
        # (Compute Engine has thousands of SKUs), holding and caching the table for the
        # quotes after it. A daemon thread: it never holds the process at exit.
        worker.join(sources.deadline_s + JOIN_SLACK_S)
        with _lock:
            done = _held.get(key)
        if done is not None and done.table is not None and done.table.fetched_at >= now:
            return done.table, done.source, ""
        error = box.get("error") or (
            f"the catalog did not answer within {sources.deadline_s:g} s "
            "(the read goes on in the background and fills the cache)"
        )
        if cached is not None:
            src = f"stale cache of {_stamp(cached)}; the catalog: {error}"
            result = _Held(cached, src, "", time.monotonic())
        else:
            more = "" if why_not == cache.NO_CACHE else f" ({why_not})"
            result = _Held(None, "", f"{error}{more}", time.monotonic())
    with _lock:
        current = _held.get(key)
        # A read that ended after the join has just put its fresh table here: keep it.
        if current is None or current.table is None or current.table.fetched_at < now:
            _held[key] = result
    return result.table, result.source, result.reason


def _parts(usage: Usage) -> tuple[list[tuple[str, float]], str]:
    """The parts of ``usage`` as (``machine:<type>`` | ``gpu:<key>``, count), or why not."""
    machine = usage.machine_type.strip().lower()
    if not machine:
        return [], "machine type unknown"
    # What Compute Engine does not offer has no price, not the sum of its made-up parts.
    if why := problem(machine, usage.gpu_type, usage.gpu_count) or zones.problem(usage.location):
        return [], why
    parts: list[tuple[str, float]] = [(f"machine:{machine}", 1.0)]
    built_in = shape(machine)
    if usage.gpu_type:
        key = gpu_key(usage.gpu_type)
        if key is None:
            return [], f"GPU type {usage.gpu_type!r} is not one spottrain knows"
        count = usage.gpu_count or (built_in.gpus if built_in and built_in.gpu == key else 0)
        if count <= 0:
            return [], f"GPU count of {usage.gpu_type!r} unknown"
        parts.append((f"gpu:{key}", float(count)))
    elif built_in and built_in.gpus:
        parts.append((f"gpu:{built_in.gpu}", float(usage.gpu_count or built_in.gpus)))
    return parts, ""


def _from_table(table: PriceTable, part: str, side: str, region: str) -> tuple[float | None, str]:
    if part.startswith("gpu:"):
        return table.get(part, side, region)
    machine = part.split(":", 1)[1]
    s = shape(machine)
    if s is None:
        return None, f"machine type {machine!r} is not in spottrain's table of shapes"
    total = 0.0
    for unit, amount in (("core", s.vcpus), ("ram", s.gib)):
        p, why = table.get(f"{unit}:{s.family}", side, region)
        if p is None:
            return None, why
        total += p * amount
    return total, ""


def price(usage: Usage, sources: Sources) -> Quote:
    """The quote for ``usage`` from ``sources``."""
    if sources.overrides_error:
        return Quote(None, None, reason=f"price unknown: {sources.overrides_error}")
    parts, why = _parts(usage)
    if why:
        return Quote(None, None, reason=f"price unknown: {why}")
    over = sources.overrides
    currency = over.currency if over else sources.currency
    platform = "vertex" if usage.platform == "vertex" else "gce"

    def overridden(part: str, side: str) -> float | None:
        return over.get(platform, part, side) if over else None

    needs_table = any(overridden(p, s) is None for p, _ in parts for s in SIDES)
    table, source, table_why = None, "", ""
    region = region_of(usage.location)
    if needs_table and platform == "gce":
        if region is None:
            table_why = f"location {usage.location!r} is not a region or zone"
        else:
            table, source, table_why = table_for(sources)
    got: dict[str, float | None] = {}
    whys: dict[str, str] = {}
    used_override = used_table = False
    for side in SIDES:
        total, why = 0.0, ""
        for part, count in parts:
            p = overridden(part, side)
            if p is not None:
                used_override = True
            elif platform == "vertex":
                why = VERTEX_CAVEAT
            elif table is None:
                why = table_why
            else:
                p, why = _from_table(table, part, side, region or "")
                used_table = used_table or p is not None
            if p is None:
                break
            total += p * count
        got[side], whys[side] = (None, why) if why else (round(total, 6), "")
    names = [n for n, used in (("SPOTTRAIN_PRICES", used_override), (source, used_table)) if used]
    if got["spot"] is None and got["on_demand"] is None:
        same = whys["spot"] == whys["on_demand"]
        reason = whys["spot"] if same else f"spot: {whys['spot']}; on-demand: {whys['on_demand']}"
        return Quote(None, None, currency, " + ".join(names), f"price unknown: {reason}")
    reason = "; ".join(
        f"{side.replace('_', '-')} price unknown: {whys[side]}" for side in SIDES if whys[side]
    )
    return Quote(got["spot"], got["on_demand"], currency, " + ".join(names), reason)
