"""Ports for the servers the tests start, without a pick-then-release race.

A port picked by binding ``127.0.0.1:0`` and closing the socket is free for anyone
until the server binds it: another checkout's suite, or any outgoing connection (its
source port comes from the same ephemeral range), can take it in between (issue 42:
kube-cp's "bind: address already in use"). So:

* a port where *nothing may answer* is held for the test, bound and not listening:
  a connection to it is refused (the kernel answers a SYN to a port without a
  listener with a RST) and no one else can bind it meanwhile (:func:`held_port`);
* a server that cannot be handed a socket is started on a fresh port again when it
  reports "address already in use" (:func:`start_on_free_ports`).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: Bounded: a port lost once is bad luck, three times in a row something else.
TRIES = 3
IN_USE = "address already in use"


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A 127.0.0.1 port that refuses connections and no one else can bind, while held."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # no listen(): connections are refused
        yield s.getsockname()[1]


def free_port() -> int:
    """A port free now (released: use only with :func:`start_on_free_ports`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_on_free_ports(start: Callable[[], T], what: str, tries: int = TRIES) -> T:
    """``start()`` (which picks its ports afresh on each call), again while it fails
    with "address already in use" in its message, at most ``tries`` times."""
    for attempt in range(1, tries + 1):
        try:
            return start()
        except RuntimeError as err:
            if IN_USE not in str(err) or attempt == tries:
                raise
            print(f"{what}: a port was taken before it bound it ({attempt} of {tries}): again")
    raise AssertionError("unreachable")
