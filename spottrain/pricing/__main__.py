"""``python -m spottrain.pricing``: fill the price cache, or quote one machine.

``refresh`` reads the catalog with no short deadline (a deploy step, a cron job) so that
runs find a fresh cache; ``quote`` prints what :func:`spottrain.pricing.quote` gives, as
JSON. Both read the same ``SPOTTRAIN_*`` variables as a run (docs/cost.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from spottrain.pricing import Sources, Usage, quote
from spottrain.pricing.cache import save
from spottrain.pricing.catalog import CatalogError, fetch
from spottrain.pricing.sources import OFF


def main(argv: list[str] | None = None) -> int:
    """Runs the command; 0, or 1 with one line on stderr."""
    parser = argparse.ArgumentParser(prog="python -m spottrain.pricing", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    refresh = sub.add_parser("refresh", help="read the catalog into the cache")
    refresh.add_argument("--deadline", type=float, default=300.0, help="seconds (300)")
    one = sub.add_parser("quote", help="print one machine's quote as JSON")
    one.add_argument("--location", required=True, help="region or zone")
    one.add_argument("--machine", required=True, help="machine type, e.g. n1-standard-8")
    one.add_argument("--gpu", default="", help="nvidia-tesla-t4, NVIDIA_L4…")
    one.add_argument("--count", type=int, default=0, help="GPUs on the machine")
    one.add_argument("--platform", choices=("gce", "vertex"), default="gce")
    args = parser.parse_args(argv)
    sources = Sources.from_env()
    if args.command == "quote":
        usage = Usage(args.location, args.machine, args.gpu, args.count, args.platform)
        print(json.dumps(dataclasses.asdict(quote(usage, sources)), indent=1))
        return 0
    if sources.catalog_endpoint == OFF:
        print(f"{parser.prog}: error: SPOTTRAIN_CATALOG_ENDPOINT is off", file=sys.stderr)
        return 1
    try:
        table = fetch(sources.catalog_endpoint, sources.currency, args.deadline)
    except CatalogError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 1
    if why := save(sources.cache_path, table):
        print(f"{parser.prog}: error: {why}", file=sys.stderr)
        return 1
    print(f"{len(table.prices)} unit prices from {table.origin} in {sources.cache_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
