"""A Ray actor that accepts a produce request and only returns: the transport limit.

Sending the same batches to it as to a partition leader, with the same number of
requests in flight, shows how much of the time goes to Ray itself.
"""

from __future__ import annotations

import ray


@ray.remote(num_cpus=0)
class BareSink:
    async def produce(self, batch: bytes, acks: str = "all", timeout_ms: int = 0) -> int:
        return 0

    async def ping(self) -> bool:
        return True
