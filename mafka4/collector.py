"""Python's cyclic collector, kept off the work where its passes cost most: paused while batches
are decoded, and kept off the objects a mafka4 process holds from its start.

**Paused while decoding** (``collection_paused``).

Decoding a batch allocates a few tracked objects per record (msgpack's tuple for the record,
then the record or message built from it), and none of them can be part of a reference cycle.
The collector's youngest generation runs every 700 tracked allocations, so decoding one MiB
batch of 1 KiB records ran it several times, each pass walking the record tuples msgpack had
just made (reference counting frees them moments later anyway) and every message built so far,
and each of those passes moved the survivors on to older generations, walked again there. In a
draining consumer's main thread, collections were a fifth of its time (py-spy;
``reports/2026-11-29-collector-pause``). msgpack's own README advises turning the collector off while unpacking a large
message.

Paused, the record tuples are freed before any collection sees them, and the messages that
outlive the decode are walked once by the first young collection after it. Nothing is lost:
the collector counts every tracked object allocated meanwhile and runs as soon as it is on again.
``batch_payload.decode_checked_batch`` pauses it for each batch it decodes (every reader: feeders,
checkers, consumers); a consumer pauses it over its whole take of a fetch's answer
(``client.fetched_messages``, ``client.vp_messages``), several batches, so that no collection
runs between them: a young collection there walked every message of the batches before, and
every tenth of them walked the older generation too.

``gc.disable`` holds for the whole process, every thread. Pauses may overlap (two consumers in
two threads): a count under a lock ends the pause when the last one ends. A collector that was
already off when the first pause began (the application's choice) is left off; one that the
application turns off during a pause is turned on again when the pause ends.

**Frozen after start** (``freeze_what_start_up_left``).

A full collection walks every object the collector tracks. Importing Ray leaves about 56,000 of
them (functions, dicts, types of its modules and of protobuf), and one full collection then
takes 35-70 ms on this machine, more in a process connected to a Ray cluster. A read node
allocates per record (decoding and splitting what it feeds, building fetch answers): fed by a
saturated producer, each of two read nodes ran 48-56 full collections in a 2.5-minute run,
about 120 ms each and up to 350 ms (wall time, the machine loaded by the run). That pause
lands on whatever feed or fetch is under way. (Whether end-to-end tail latency gains is not
established yet: ``reports/2026-11-27-consumer-decoding``.)

``freeze_what_start_up_left`` collects once and then moves every object alive into the
collector's permanent generation (``gc.freeze``): collections no longer walk them. Reference
counting still frees each of them as usual; only a reference cycle among them would never be
freed, and the objects a process makes while starting (its modules, its configuration, its
clients) live as long as the process anyway. What the process allocates afterwards is
collected as before.

The read-node actor calls it once it is built; with it, the same runs' full collections took
4-7 ms on average. A replica actor passes batches through as bytes, but its timers, stream calls
and etcd client still allocate: in `mafka4 experiment scaling` at one consumer, replica actors
ran full collections of 54-123 ms that collected nothing, each stalling the produce requests
and followers it served for as long (``reports/2026-12-04-replica-collector``). So it calls it
too, once built. Only processes mafka4 owns may call it: the
setting holds for the whole process, so an application's own process is the application's to
tune (the README's Tuning says how).
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_pauses = 0  # pauses under way, all threads
_resume = False  # whether the last pause to end turns the collector back on


class _Pause:
    """The context manager ``collection_paused`` returns. A class, not a ``contextlib`` generator:
    a consumer enters one per batch it decodes, and the generator's machinery cost 1.5 µs per
    entry and exit here, a tenth of the per-batch cost of a VP batch of a few dozen records."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _pauses, _resume
        with _lock:
            if _pauses == 0:
                _resume = gc.isenabled()
                gc.disable()
            _pauses += 1

    def __exit__(self, *exc_info: object) -> None:
        global _pauses
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


_PAUSE = _Pause()


def collection_paused() -> _Pause:
    """Keep the cyclic collector from running inside the ``with`` block (see the module doc)."""
    return _PAUSE


def freeze_what_start_up_left() -> int:
    """Collect once, then keep every object alive now out of later collections; how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
