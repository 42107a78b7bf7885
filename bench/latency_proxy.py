"""A TCP proxy that adds network latency: every forwarded chunk waits RTT/2 each way.

    python bench/latency_proxy.py --listen PORT --upstream HOST:PORT [--rtt-ms 20]

Prints ``listening PORT`` when ready. A line with a number on stdin sets a new RTT
in ms (for connections already open too) and is answered with ``rtt MS``, so one
proxy (and one emulator whose ``-external-url`` points at it) serves every RTT.

Why this and not ``tc netem``: the kernel here has no netem (and we have no root).

What the chunk delay models, and what not, compared with a real network path:
  * A request and its response each arrive RTT/2 after they were sent, and a
    stream of chunks is delayed, not throttled (chunks are queued with their
    arrival time, so they overlap): one request costs one RTT, like real GCS.
  * A new connection also waits ``--handshake-rtts`` RTTs (default 2: TCP's
    SYN/SYN-ACK plus TLS 1.3) before its first byte is forwarded; locally,
    connect() itself returns at once.
  * Not modelled: TCP's congestion window and the bandwidth-delay product, so a
    single large stream is not slowed by the RTT here as it is on a real path;
    nor loss, jitter or server-side processing time. Figures for many small
    files are therefore closer to real GCS than those for one large file.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

RTT = {"s": 0.02}  # current round trip in seconds, shared by all connections
HANDSHAKE_RTTS = {"n": 2}


async def _pump(reader, writer, start_at: float) -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def deliver() -> None:
        while (item := await queue.get()) is not None:
            due, chunk = item
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(deliver())
    try:
        while chunk := await reader.read(1 << 16):
            queue.put_nowait((max(start_at, time.monotonic() + RTT["s"] / 2), chunk))
    except ConnectionError:
        pass
    queue.put_nowait(None)
    await sender


async def _serve(client_reader, client_writer, host: str, port: int) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(host, port)
    except OSError:
        client_writer.close()
        return
    # The first request byte reaches the server after the handshake and RTT/2.
    start_at = time.monotonic() + (HANDSHAKE_RTTS["n"] + 0.5) * RTT["s"]
    try:
        await asyncio.gather(
            _pump(client_reader, up_writer, start_at), _pump(up_reader, client_writer, 0)
        )
    except ConnectionError:
        pass
    finally:
        client_writer.close()
        up_writer.close()


async def _control() -> None:
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        RTT["s"] = float(line) / 1000
        print(f"rtt {RTT['s'] * 1000:g}", flush=True)
    os._exit(0)  # stdin closed: the parent is gone; drop open connections at once


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, default=0, help="port on 127.0.0.1 (0: any)")
    parser.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--handshake-rtts", type=int, default=2)
    args = parser.parse_args(argv)
    RTT["s"], HANDSHAKE_RTTS["n"] = args.rtt_ms / 1000, args.handshake_rtts
    host, port = args.upstream.rsplit(":", 1)
    server = await asyncio.start_server(
        lambda r, w: _serve(r, w, host, int(port)), "127.0.0.1", args.listen
    )
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await _control()


if __name__ == "__main__":
    asyncio.run(main())
