"""tests/ports.py: a port where nothing may answer stays so for the whole test (issue 42)."""

from __future__ import annotations

import errno
import socket

import pytest
from ports import held_port, start_on_free_ports


def test_a_held_port_refuses_connections_and_no_server_can_take_it():
    with held_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        # create_server sets SO_REUSEADDR, as http.server and Go's listeners do.
        with pytest.raises(OSError) as taken:
            socket.create_server(("127.0.0.1", port))
        assert taken.value.errno == errno.EADDRINUSE


def test_a_start_that_lost_its_port_is_tried_again_a_bounded_number_of_times():
    starts = []

    def start(lose: int):
        starts.append(1)
        if len(starts) <= lose:
            raise RuntimeError("listen tcp 127.0.0.1:1: bind: address already in use")
        return "up"

    assert start_on_free_ports(lambda: start(2), "server") == "up" and len(starts) == 3
    starts.clear()
    with pytest.raises(RuntimeError, match="in use"):
        start_on_free_ports(lambda: start(99), "server")
    assert len(starts) == 3

    def broken():
        starts.append(1)
        raise RuntimeError("exited 1: bad flag")

    starts.clear()
    with pytest.raises(RuntimeError, match="bad flag"):
        start_on_free_ports(broken, "server")
    assert len(starts) == 1  # not a port lost: not tried again
