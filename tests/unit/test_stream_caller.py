"""The synchronous consumers' stream calls (``mafka4.client.stream_caller``): a real stream
server on loopback, served from its own event loop thread, and a stand-in for the Ray handle
that tells where it listens. No Ray, no clock."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from mafka4.client import stream_caller as stream_caller_module
from mafka4.client.stream_caller import StreamCaller, close_stream_caller, stream_caller
from mafka4.errors import StreamLost
from mafka4.transport.stream_calls import StreamServer


class ReadNode:
    async def fetch(self, offset: int, bytes_max: int) -> tuple[int, bytes]:
        return offset, b"m" * bytes_max


class NewReadNode:
    async def fetch(self, offset: int, bytes_max: int) -> tuple[int, bytes]:
        return offset, b"new"


class ServingThread:
    """A read node's stream server on an event loop of its own, as in another process."""

    def __init__(self, served: object | None = None):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = StreamServer(served or ReadNode(), frozenset({"fetch"}), "read node r0")
        self.endpoint = self._run(self.server.start("127.0.0.1"))

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        async def close():
            self.server.close()
        self._run(close())
        self.loop.call_soon_threadsafe(self.loop.stop)


class FakeActor:
    """``actor.stream_endpoint.remote().future()``, as a Ray handle answers it; handles of one
    actor compare equal, as Ray's do (by actor id)."""

    def __init__(self, endpoint):
        self.stream_endpoint = self
        self._endpoint = endpoint

    def remote(self) -> "FakeActor":
        return self

    def __eq__(self, other) -> bool:
        return isinstance(other, FakeActor) and other._endpoint == self._endpoint

    def __hash__(self) -> int:
        return hash(self._endpoint)

    def future(self) -> concurrent.futures.Future:
        future = concurrent.futures.Future()
        future.set_result(self._endpoint)
        return future


@pytest.fixture
def caller():
    caller = StreamCaller()
    yield caller
    caller.close()


def test_calls_return_futures_the_caller_waits_on_together(caller):
    serving = ServingThread()
    try:
        actor = FakeActor(serving.endpoint)
        calls = [caller.call(actor, "local/read_node/r0", "fetch", offset, 1024) for offset in range(3)]
        done, _ = concurrent.futures.wait(calls)
        assert [call.result() for call in calls] == [(offset, b"m" * 1024) for offset in range(3)]
    finally:
        serving.stop()


def test_a_call_with_another_handle_of_the_same_name_goes_to_the_actor_that_handle_names(caller):
    old, new = ServingThread(), ServingThread(NewReadNode())
    name = "local/read_node/r0"
    try:
        assert caller.call(FakeActor(old.endpoint), name, "fetch", 1, 0).result() == (1, b"")
        # The old actor still answers (a replaced node not dead yet): the new handle must not reach it.
        assert caller.call(FakeActor(new.endpoint), name, "fetch", 2, 0).result() == (2, b"new")
    finally:
        old.stop()
        new.stop()


def test_after_a_failed_call_the_next_opens_a_stream_from_the_handle_it_brings(caller):
    first = ServingThread()
    name = "local/read_node/r0"
    assert caller.call(FakeActor(first.endpoint), name, "fetch", 1, 0).result() == (1, b"")
    first.stop()  # the node died; a restarted one listens elsewhere
    with pytest.raises(StreamLost):
        caller.call(FakeActor(first.endpoint), name, "fetch", 2, 0).result()
    restarted = ServingThread()
    try:
        assert caller.call(FakeActor(restarted.endpoint), name, "fetch", 3, 0).result() == (3, b"")
    finally:
        restarted.stop()


def test_close_ends_every_stream_and_task_so_that_exit_prints_no_warning(caller):
    serving = ServingThread()
    try:
        actor = FakeActor(serving.endpoint)
        assert caller.call(actor, "local/read_node/r0", "fetch", 0, 8).result(5) == (0, b"m" * 8)
        (_, stream), = caller._streams.values()
        connection = stream._client._connection
        assert not connection.broken, "the stream stays open for the next call"
        caller.close()
        assert not caller._thread.is_alive() and not asyncio.all_tasks(caller._loop)
        assert connection.broken and connection.protocol._transport.is_closing()
        caller.close()  # idempotent, as at exit after an explicit close
    finally:
        serving.stop()


def test_closing_the_process_s_caller_stops_its_thread_and_the_next_use_starts_another():
    first = stream_caller()
    close_stream_caller()
    assert not first._thread.is_alive() and stream_caller_module._caller is None
    second = stream_caller()
    try:
        assert second is not first and second._thread.is_alive()
    finally:
        close_stream_caller()
    close_stream_caller()  # nothing left to close
