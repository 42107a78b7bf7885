"""Reads Compute Engine's list prices from the Cloud Billing Catalog API.

With google-cloud-billing's own client (``billing_v1.CloudCatalogClient``): ``ListServices``
finds Compute Engine, ``ListSkus(parent="services/<id>")`` lists its SKUs page by page
(google-cloud-billing, billing_v1/services/cloud_catalog/client.py ``list_services``,
``list_skus``; the request fields in billing_v1/types/cloud_catalog.py ``ListSkusRequest``:
``currency_code``, ``page_size`` "Defaults to 5000", ``page_token``). Every call gets what
is left of one total deadline as its timeout and no retry, so a fetch ends in time.
google-cloud-billing is imported here only: spottrain.pricing imports without it.
"""

from __future__ import annotations

import time
from typing import Any

from spottrain.pricing.skus import PriceTable, rate_of

__all__ = ["COMPUTE_ENGINE", "CatalogError", "fetch", "origin_of"]

#: Display name and id of Compute Engine in the catalog; the id is the API reference's
#: own example ("services/6F81-5844-456A", billing_v1/types/cloud_catalog.py ``Sku.name``),
#: used when ListServices does not name it.
COMPUTE_ENGINE = ("Compute Engine", "6F81-5844-456A")
#: Vertex AI's service; its SKUs are not read (docs/cost.md, "Where prices come from").
VERTEX_AI = "Vertex AI"
GOOGLE = "cloudbilling.googleapis.com"
PAGE_SIZE = 5000
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]", "::1")


class CatalogError(RuntimeError):
    """The catalog could not be read; the message is one line."""


def origin_of(endpoint: str) -> str:
    """The name a table from ``endpoint`` is cached under (``off`` reads Google's cache)."""
    return GOOGLE if endpoint in ("", "off") else endpoint


def _is_loopback(endpoint: str) -> bool:
    host = endpoint.rsplit(":", 1)[0] if endpoint.count(":") == 1 or "]" in endpoint else endpoint
    return host in _LOOPBACK


def _client(endpoint: str) -> Any:
    try:
        import grpc
        from google.cloud import billing_v1
        from google.cloud.billing_v1.services.cloud_catalog.transports import (
            CloudCatalogGrpcTransport,
        )
    except ImportError as e:
        raise CatalogError("google-cloud-billing is not installed") from e
    if endpoint and _is_loopback(endpoint):
        # A stand-in on this machine speaks plain gRPC; a channel given to the transport
        # makes it skip credentials (transports/grpc.py sets _ignore_credentials).
        channel = grpc.insecure_channel(endpoint)
        return billing_v1.CloudCatalogClient(transport=CloudCatalogGrpcTransport(channel=channel))
    options = {"api_endpoint": endpoint} if endpoint else None
    return billing_v1.CloudCatalogClient(client_options=options)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text[:300]}"


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise CatalogError(f"the catalog did not answer within {self.seconds:g} s")
        return left


def fetch(endpoint: str, currency: str, deadline_s: float) -> PriceTable:
    """Compute Engine's prices from the catalog at ``endpoint`` (``""``: Google's).

    Raises:
        CatalogError: unreachable, refused, too slow, or not a catalog (one line).
    """
    deadline = _Deadline(deadline_s)
    try:
        client = _client(endpoint)
    except CatalogError:
        raise
    except Exception as e:  # no credentials, a bad endpoint: one line, never a crash
        raise CatalogError(_one_line(e)) from e
    try:
        return _read(client, endpoint, currency, deadline)
    except CatalogError:
        raise
    except Exception as e:  # gRPC errors (google.api_core.exceptions), malformed answers
        raise CatalogError(_one_line(e)) from e
    finally:
        client.transport.close()


def _read(client: Any, endpoint: str, currency: str, deadline: _Deadline) -> PriceTable:
    service_id, token = "", ""
    while True:
        pager = client.list_services(
            request={"page_size": PAGE_SIZE, "page_token": token},
            timeout=deadline.left(),
            retry=None,
        )
        # The pager hands its first page's fields through (pagers.py ListServicesPager.__getattr__).
        for service in pager.services:
            if service.display_name == COMPUTE_ENGINE[0]:
                service_id = service.service_id
        token = pager.next_page_token
        if service_id or not token:
            break
    table = PriceTable(currency=currency, origin=origin_of(endpoint))
    token = ""
    while True:
        pager = client.list_skus(
            request={
                "parent": f"services/{service_id or COMPUTE_ENGINE[1]}",
                "currency_code": currency,
                "page_size": PAGE_SIZE,
                "page_token": token,
            },
            timeout=deadline.left(),
            retry=None,
        )
        for sku in pager.skus:
            rate, _ = rate_of(sku, currency)
            if rate is not None:
                table.add(rate)
        token = pager.next_page_token
        if not token:
            return table
