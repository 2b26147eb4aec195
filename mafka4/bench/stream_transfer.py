"""``mafka4 bench stream``: what a stream call carrying a fetch answer costs, on each side. No cluster.

A server process (spawned, a fresh interpreter) serves ``fetch`` over a ``StreamServer``
(``runtime.stream_calls``) and answers every call with the same answer a read node gives a
consumer: one ``ConsumerAnswer`` whose data is ``answer_bytes`` of VP batches (1,000 records of
``message_bytes`` random bytes each, stamped, as a VP log holds them). This process calls it
``calls`` times in a row, one call in flight, and measures:

* its own CPU time (every thread: the caller's side of the transport) and the server's (the
  sum of its threads' ``schedstat``, ``bench.process_usage``), each per MiB of answer;
* the wall time per MiB, and MiB/s;
* with ``decode``, the caller also turns each answer into messages as a consumer of a VP does
  (``client.vp_messages.take_vp_messages``, CRCs checked), and the report gives its CPU per
  message.

What it leaves out: the read node's log read (the answer is made once) and every other process
of a cluster; so the figures are the transport's, next to the decoding a consumer adds. Each
repetition is a fresh server process; the first ``WARM_CALLS`` calls of each are not timed.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mafka4.bench.usage import is_quiet
from mafka4.errors import InvalidConfig
from mafka4.limits import ConsumerConfig, MiB

# Calls made before the timed ones: connection set-up and the first allocations are not the transport's cost.
WARM_CALLS = 10
RECORDS_PER_BATCH = 1000
CALLS_MAX = 100_000
ANSWER_BYTES_MAX = 64 * MiB
SERVER_START_S_MAX = 60.0
# A VP record's bytes beside its value: msgpack framing and its 12-byte source (about).
_RECORD_FRAMING_BYTES = 24


@dataclass(frozen=True, slots=True)
class StreamBenchSettings:
    calls: int = field(default=400, metadata={"help": "timed calls per repetition, one in flight"})
    answer_bytes: int = field(default=ConsumerConfig().fetch_bytes_max, metadata={
        "help": "bytes of VP batches in each answer, about (the default is a consumer's fetch_bytes_max)"})
    message_bytes: int = field(default=1024, metadata={"help": "bytes of each record's value"})
    repetitions: int = field(default=3, metadata={"help": "runs, each with a fresh server process"})
    decode: bool = field(default=False, metadata={
        "help": "the caller also decodes every answer into messages, as a consumer of a VP does"})
    smoke: bool = False

    def __post_init__(self) -> None:
        for name, low, high in (("calls", 1, CALLS_MAX), ("answer_bytes", 1, ANSWER_BYTES_MAX),
                                ("message_bytes", 1, MiB), ("repetitions", 1, 100)):
            value = getattr(self, name)
            if not low <= value <= high:
                raise InvalidConfig(f"{name}={value} is out of range: use {low} to {high}")

    @classmethod
    def smoke_sized(cls, **changes) -> "StreamBenchSettings":
        """A run of a second for tests: 5 calls of 64 KiB, one repetition."""
        return cls(**{"calls": 5, "answer_bytes": 64 * 1024, "repetitions": 1, "smoke": True, **changes})


def vp_answer_data(answer_bytes: int, message_bytes: int) -> bytes:
    """Stamped VP batches of ``RECORDS_PER_BATCH`` records of random values (the last one fewer),
    about ``answer_bytes`` in all and at least one record."""
    from mafka4.batch_frame import stamp
    from mafka4.virtual.vp_records import SourcedRecord, encode_vp_batch

    records_left = max(1, answer_bytes // (message_bytes + _RECORD_FRAMING_BYTES))
    batches, base = [], 0
    while records_left:
        count = min(RECORDS_PER_BATCH, records_left)
        batch = bytearray(encode_vp_batch([SourcedRecord(0, base + i, 0, 1_700_000_000_000 + i, None,
                                                         os.urandom(message_bytes)) for i in range(count)]))
        stamp(batch, base, 0)
        batches.append(bytes(batch))
        base, records_left = base + count, records_left - count
    return b"".join(batches)


class _Answering:
    """The served object: every fetch gets the same answer."""

    def __init__(self, answer: list):
        self._answer = answer

    async def fetch(self, offset: int) -> list:
        return self._answer


def _serve(answer_bytes: int, message_bytes: int, ready, stop) -> None:
    """The server process: serve until ``stop``; put ``(endpoint, pid)`` on ``ready`` once listening."""
    from mafka4.transport.stream_calls import StreamServer
    from mafka4.virtual.consumer_reads import ConsumerAnswer
    from mafka4.virtual.hosted_vp import VpRead

    data = vp_answer_data(answer_bytes, message_bytes)
    answer = [ConsumerAnswer(VpRead(data, 2**62, 0, 2**62))]

    async def main() -> None:
        server = StreamServer(_Answering(answer), frozenset({"fetch"}), "bench stream server")
        ready.put((await server.start("127.0.0.1"), os.getpid()))
        while not stop.is_set():
            await asyncio.sleep(0.05)
        server.close()

    asyncio.run(main())


def _repetition(settings: StreamBenchSettings) -> dict:
    from mafka4.bench.process_usage import sample_process
    from mafka4.bench.usage import cpu_ns_between
    from mafka4.client.vp_messages import take_vp_messages
    from mafka4.transport.stream_calls import StreamClient, StreamHandle

    context = multiprocessing.get_context("spawn")
    ready, stop = context.Queue(), context.Event()
    server = context.Process(target=_serve, args=(settings.answer_bytes, settings.message_bytes, ready, stop),
                             name="bench-stream-server")
    server.start()
    loop = asyncio.new_event_loop()
    try:
        endpoint, server_pid = ready.get(timeout=SERVER_START_S_MAX)

        async def resolve():
            return endpoint
        handle = StreamHandle(StreamClient(resolve, "bench stream server"))
        for _ in range(WARM_CALLS):
            answer_data = loop.run_until_complete(handle.fetch.remote(0))[0].read.data
        load_start = os.getloadavg()[0]
        server_before = sample_process(server_pid)
        cpu_before, wall_before = time.process_time_ns(), time.perf_counter()
        messages = 0
        for _ in range(settings.calls):
            answer_data = loop.run_until_complete(handle.fetch.remote(0))[0].read.data
            if settings.decode:
                taken: list = []
                take_vp_messages(answer_data, "bench", 0, 0, taken, 2**31, True)
                messages += len(taken)
        wall_s = time.perf_counter() - wall_before
        cpu_ns, server_after = time.process_time_ns() - cpu_before, sample_process(server_pid)
        load_end = os.getloadavg()[0]
        handle.close()
    finally:
        stop.set()
        server.join(SERVER_START_S_MAX)
        if server.exitcode is None:
            server.kill()
        loop.close()
    mib = settings.calls * len(answer_data) / MiB
    server_ns = cpu_ns_between(server_before.thread_cpu_ns, server_after.thread_cpu_ns)
    return {"answer_bytes": len(answer_data), "calls": settings.calls, "mib": round(mib, 2),
            "caller_cpu_ms_per_mib": round(cpu_ns / 1e6 / mib, 4),
            "server_cpu_ms_per_mib": round(server_ns / 1e6 / mib, 4), "wall_ms_per_mib": round(wall_s * 1e3 / mib, 4), "mib_per_s": round(mib / wall_s, 1),
            "messages_decoded": messages,
            "caller_cpu_us_per_message": round(cpu_ns / 1e3 / messages, 4) if messages else None,
            "load_average_1m": [round(load_start, 2), round(load_end, 2)], "quiet": is_quiet([load_start, load_end])}


def run_stream_bench(settings: StreamBenchSettings, output_path: str) -> dict:
    rows = [_repetition(settings) for _ in range(settings.repetitions)]
    figures = ("caller_cpu_ms_per_mib", "server_cpu_ms_per_mib", "wall_ms_per_mib", "mib_per_s",
               "caller_cpu_us_per_message")
    summary = {name: (statistics.median(row[name] for row in rows) if rows[0][name] is not None else None)
               for name in figures}
    summary["quiet_repetitions"] = f"{sum(row['quiet'] for row in rows)}/{len(rows)}"
    report = {"settings": asdict(settings), "rows": rows, "summary": summary, "cpu_count": os.cpu_count(),
              "result": not settings.smoke}
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
