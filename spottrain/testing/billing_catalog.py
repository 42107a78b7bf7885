"""A stand-in of the Cloud Billing Catalog API on loopback, for tests and ``make run``.

A real gRPC server answering ``google.cloud.billing.v1.CloudCatalog``'s ``ListServices``
and ``ListSkus`` (the method paths google-cloud-billing's own transport calls:
billing_v1/services/cloud_catalog/transports/grpc.py, "/google.cloud.billing.v1.
CloudCatalog/ListSkus") with the API's own messages, serialized by the proto-plus types
google-cloud-billing ships. The package ships no servicer (GAPIC clients carry none), so
the methods are registered as generic handlers. Pages are cut at ``max_page_size`` (an
API may return fewer items than asked for), so a client's paging is exercised::

    with serve() as (catalog, address):
        os.environ["SPOTTRAIN_CATALOG_ENDPOINT"] = address   # 127.0.0.1:port

``python -m spottrain.testing.billing_catalog`` runs one until interrupted, printing its
address. The SKUs (``billing_catalog_data.py``) are shapes with illustrative prices.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.cloud import billing_v1

from spottrain.pricing import sources
from spottrain.testing.billing_catalog_data import SERVICES, SKUS
from spottrain.testing.environ import environ

__all__ = ["Catalog", "local_prices", "serve", "start"]

SERVICE = "google.cloud.billing.v1.CloudCatalog"


@dataclass
class Catalog:
    """What the stand-in serves, and what it was asked.

    Attributes:
        services: (service_id, display_name) pairs.
        skus: service id → ``billing_v1.Sku`` keyword arguments.
        max_page_size: The most items one page holds, whatever the request asks.
        hold: While set to an unset event, every call waits on it (a catalog that does
            not answer); set it to let them go.
        calls: (method, request) of every call, in order.
    """

    services: list[tuple[str, str]] = field(default_factory=lambda: list(SERVICES))
    skus: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: dict(SKUS))
    max_page_size: int = 4
    hold: threading.Event | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def _page(self, items: list, size: int, token: str, context: grpc.ServicerContext) -> tuple:
        try:
            start = int(token) if token else 0
            if not 0 <= start <= len(items):
                raise ValueError
        except ValueError:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad page_token {token!r}")
        size = min(size or 5000, self.max_page_size)  # ListSkusRequest: "Defaults to 5000"
        end = start + size
        return items[start:end], str(end) if end < len(items) else ""

    def _wait(self) -> None:
        if self.hold is not None:
            self.hold.wait()

    def list_services(self, request: Any, context: grpc.ServicerContext) -> Any:
        """``ListServices``."""
        self.calls.append(("ListServices", request))
        self._wait()
        page, token = self._page(self.services, request.page_size, request.page_token, context)
        return billing_v1.ListServicesResponse(
            services=[
                billing_v1.Service(name=f"services/{sid}", service_id=sid, display_name=name)
                for sid, name in page
            ],
            next_page_token=token,
        )

    def list_skus(self, request: Any, context: grpc.ServicerContext) -> Any:
        """``ListSkus``."""
        self.calls.append(("ListSkus", request))
        self._wait()
        sid = request.parent.removeprefix("services/")
        if sid not in {s for s, _ in self.services}:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no service {request.parent!r}")
        if request.currency_code not in ("", "USD"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the stand-in serves USD only")
        items = self.skus.get(sid, [])
        page, token = self._page(items, request.page_size, request.page_token, context)
        return billing_v1.ListSkusResponse(
            skus=[billing_v1.Sku(**s) for s in page], next_page_token=token
        )


def _handler(method: Any, request_type: Any, response_type: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        method,
        request_deserializer=request_type.deserialize,
        response_serializer=response_type.serialize,
    )


def start(port: int = 0, catalog: Catalog | None = None) -> tuple[grpc.Server, str]:
    """Starts a stand-in on 127.0.0.1 (``port`` 0: a free one); returns it and its address."""
    catalog = catalog or Catalog()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handlers = {
        "ListServices": _handler(
            catalog.list_services,
            billing_v1.ListServicesRequest,
            billing_v1.ListServicesResponse,
        ),
        "ListSkus": _handler(
            catalog.list_skus, billing_v1.ListSkusRequest, billing_v1.ListSkusResponse
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    if bound == 0:
        raise OSError(f"cannot bind 127.0.0.1:{port}")
    server.start()
    return server, f"127.0.0.1:{bound}"


@contextlib.contextmanager
def serve(catalog: Catalog | None = None, port: int = 0) -> Iterator[tuple[Catalog, str]]:
    """A running stand-in for the ``with`` block: (its catalog, its address)."""
    catalog = catalog or Catalog()
    server, address = start(port, catalog)
    try:
        yield catalog, address
    finally:
        if catalog.hold is not None:
            catalog.hold.set()  # let held calls end, or stop() waits on them
        server.stop(grace=None).wait()


@contextlib.contextmanager
def local_prices(out: Path, say: Callable[[str], None] = print) -> Iterator[None]:
    """A stand-in for a local run (``make run``), unless the user named prices.

    A local run has no cloud to ask, so its figures come from the stand-in's
    illustrative list prices (docs/cost.md); they are cached in ``out``, never in the
    user's price cache, where they would pass for Google's. The environment points at
    it for the block (kfp.local's tasks and the demo's workers inherit it).
    """
    if os.environ.get(sources.ENDPOINT_ENV) or os.environ.get(sources.PRICES_ENV):
        yield
        return
    with serve() as (_, address):
        say(f"stand-in Cloud Billing Catalog at {address} (illustrative list prices)")
        cache = Path(out) / "prices-standin.json"
        cache.unlink(missing_ok=True)  # an earlier run's
        with environ({sources.ENDPOINT_ENV: address, sources.CACHE_ENV: str(cache)}):
            yield


def main(argv: list[str] | None = None) -> int:
    """Runs a stand-in until SIGINT/SIGTERM, printing ``SPOTTRAIN_CATALOG_ENDPOINT=<addr>``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server, address = start(args.port)
    print(f"SPOTTRAIN_CATALOG_ENDPOINT={address}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1).wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
