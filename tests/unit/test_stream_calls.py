"""Stream calls (``mafka4.transport.stream_calls``): a real server and client on loopback, no Ray.

The resolver stands in for the Ray call that tells a caller where the serving actor listens.
Every wait is on an event or a call's answer, never on a clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

import pytest

from mafka4.errors import MafkaError, NotLeader, StreamLost
from mafka4.transport import stream_frames
from mafka4.transport.stream_calls import StreamClient, StreamEndpoint, StreamHandle, StreamServer

HOST = "127.0.0.1"


class Replica:
    """A served object: echoes bytes, raises, parks until released, answers what does not pickle."""

    def __init__(self):
        self.released = asyncio.Event()
        self.parked = asyncio.Event()

    async def fetch(self, offset: int, bytes_max: int = 0) -> tuple[int, bytes]:
        return offset, b"x" * bytes_max

    async def refuse(self) -> None:
        raise NotLeader("w1 is not the leader of orders-0 (leader: w2)")

    async def park(self) -> str:
        self.parked.set()
        await self.released.wait()
        return "released"

    async def unpicklable(self):
        return lambda: None

    async def private(self) -> None:
        raise AssertionError("never served")

    async def record(self, value: bytes) -> int:
        self.recorded = value
        self.parked.set()
        return len(value)


METHODS = frozenset({"fetch", "refuse", "park", "unpicklable", "record"})


async def _served(replica: Replica | None = None) -> tuple[StreamServer, StreamEndpoint]:
    server = StreamServer(replica or Replica(), METHODS, "replica w1 of orders-0")
    return server, await server.start(HOST)


def _client(endpoint: StreamEndpoint) -> StreamHandle:
    async def resolve() -> StreamEndpoint:
        return endpoint
    return StreamHandle(StreamClient(resolve, "replica w1 of orders-0"))


@contextlib.asynccontextmanager
async def _connected(replica: Replica | None = None, token: bytes | None = None):
    """A served ``replica`` and a handle to it (presenting ``token`` instead of the server's, if given)."""
    server, endpoint = await _served(replica)
    if token is not None:
        endpoint = StreamEndpoint(endpoint.host, endpoint.port, token)
    handle = _client(endpoint)
    try:
        yield handle
    finally:
        handle.close()
        server.close()


def test_a_call_carries_its_arguments_and_a_mib_answer_back():
    async def main():
        async with _connected() as handle:
            assert await handle.fetch.remote(7, bytes_max=1 << 20) == (7, b"x" * (1 << 20))
            assert await handle.fetch.remote(8) == (8, b""), "the connection is kept for the next call"
    asyncio.run(main())


def test_an_error_raised_by_the_method_reaches_the_caller_as_itself():
    async def main():
        async with _connected() as handle:
            with pytest.raises(NotLeader, match="leader: w2"):
                await handle.refuse.remote()
            assert await handle.fetch.remote(1) == (1, b""), "an error leaves the connection usable"
    asyncio.run(main())


def test_a_parked_call_does_not_hold_up_later_calls_on_the_same_connection():
    async def main():
        replica = Replica()
        async with _connected(replica) as handle:
            parked = asyncio.ensure_future(handle.park.remote())
            await replica.parked.wait()
            assert await handle.fetch.remote(3) == (3, b""), "answered while the first call is parked"
            replica.released.set()
            assert await parked == "released"
    asyncio.run(main())


def test_a_call_sent_without_waiting_for_its_answer_is_made_and_its_answer_dropped():
    async def main():
        replica = Replica()
        async with _connected(replica) as handle:
            assert await handle.record.send(b"acks=0") is None, "returns once written, with no answer"
            await replica.parked.wait()
            assert replica.recorded == b"acks=0"
            assert await handle.fetch.remote(4) == (4, b""), "the unread answer does not disturb the next call"
    asyncio.run(main())


def test_a_method_the_server_does_not_serve_is_refused_by_name():
    async def main():
        async with _connected() as handle:
            with pytest.raises(MafkaError, match="not 'private'"):
                await handle.private.remote()
    asyncio.run(main())


def test_an_answer_that_does_not_pickle_fails_the_call_with_a_named_error():
    async def main():
        async with _connected() as handle:
            with pytest.raises(MafkaError, match="could not be sent"):
                await handle.unpicklable.remote()
    asyncio.run(main())


def test_a_wrong_token_is_refused():
    async def main():
        async with _connected(token=b"not the token") as handle:
            with pytest.raises(StreamLost, match="broke"):
                await handle.fetch.remote(1)
    asyncio.run(main())


def test_a_call_in_flight_when_the_server_goes_fails_and_the_next_finds_the_new_server():
    async def main():
        replica = Replica()
        server, endpoint = await _served(replica)
        endpoints = [endpoint]

        async def resolve() -> StreamEndpoint:
            return endpoints[-1]  # what the restarted actor would answer
        handle = StreamHandle(StreamClient(resolve, "replica w1 of orders-0"))
        try:
            parked = asyncio.ensure_future(handle.park.remote())
            await replica.parked.wait()
            server.close()
            with pytest.raises(StreamLost, match="retried"):
                await parked
            with pytest.raises(StreamLost, match="cannot connect"):
                await handle.fetch.remote(1)  # the old port: nothing listens
            restarted, new_endpoint = await _served()
            endpoints.append(new_endpoint)
            assert await handle.fetch.remote(2) == (2, b"")
            restarted.close()
        finally:
            handle.close()
            server.close()
    asyncio.run(main())


def test_a_frame_above_the_bound_is_refused_before_it_is_sent(monkeypatch):
    monkeypatch.setattr(stream_frames, "STREAM_FRAME_BYTES_MAX", 1000)

    async def main():
        async with _connected() as handle:
            with pytest.raises(StreamLost, match="STREAM_FRAME_BYTES_MAX"):
                await handle.fetch.remote(b"y" * 2000)
    asyncio.run(main())


def test_an_answer_above_the_bound_reaches_the_caller_as_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(stream_frames, "STREAM_FRAME_BYTES_MAX", 1000)

    async def main():
        async with _connected() as handle:
            with pytest.raises(StreamLost, match="a smaller bytes_max"):
                await handle.fetch.remote(1, bytes_max=2000)
            assert await handle.fetch.remote(2) == (2, b""), "the connection stays usable"
    asyncio.run(main())


def _raw_frame(body: bytes, buffer_count: int = 0) -> bytes:
    """A frame's head and body as the wire has them (``stream_frames``), written by hand."""
    return struct.pack(">II", len(body), buffer_count) + b"\0" * (4 * buffer_count) + body


def test_a_peer_that_announces_a_huge_frame_is_dropped():
    async def main():
        server, endpoint = await _served()
        reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
        writer.write(_raw_frame(endpoint.token))
        writer.write(struct.pack(">II", 2 ** 32 - 1, 0))
        await writer.drain()
        assert await reader.read() == b"", "the server closed the connection"
        writer.close()
        server.close()
    asyncio.run(main())


def test_a_request_that_does_not_unpickle_drops_its_connection():
    async def main():
        server, endpoint = await _served()
        reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
        writer.write(_raw_frame(endpoint.token) + _raw_frame(b"\x80\x05not a pickle"))
        await writer.drain()
        assert await reader.read() == b""
        writer.close()
        server.close()
    asyncio.run(main())


def test_large_arguments_and_answers_cross_out_of_band_and_arrive_as_bytearray():
    async def main():
        replica = Replica()
        async with _connected(replica) as handle:
            batch = bytes(range(256)) * 8192  # 2 MiB
            assert await handle.record.remote(batch) == len(batch)
            assert type(replica.recorded) is bytearray and replica.recorded == batch
            offset, data = await handle.fetch.remote(5, bytes_max=3 << 20)
            assert offset == 5 and type(data) is bytearray and data == b"x" * (3 << 20)
            assert await handle.record.remote(b"small") == 5 and type(replica.recorded) is bytes
    asyncio.run(main())
