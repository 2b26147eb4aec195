"""Bare Ray actors: the transport limit, and the least one actor costs.

``BareSink`` accepts a produce request and only returns: sending the same batches to it as to
a partition leader, with the same number of requests in flight, shows how much of the time goes
to Ray itself, or (over its stream, as a leader serves ``produce``) to the stream. ``IdleActor`` has one method and nothing else: idle, it shows what a process per
virtual partition would cost at the least (``bench vp-density``).
"""

from __future__ import annotations

import os

import ray

from mafka4.transport.stream_calls import StreamEndpoint, StreamServer


@ray.remote(num_cpus=0)
class BareSink:
    def __init__(self):
        self._stream_server = StreamServer(self, frozenset({"produce"}), "bare sink")

    async def produce(self, batch: bytes, acks: str = "all", timeout_ms: int = 0) -> int:
        return 0

    async def stream_endpoint(self) -> StreamEndpoint:
        return await self._stream_server.start(ray.util.get_node_ip_address())

    async def ping(self) -> bool:
        return True


@ray.remote(num_cpus=0)
class IdleActor:
    def pid(self) -> int:
        return os.getpid()
