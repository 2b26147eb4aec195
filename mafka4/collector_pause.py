"""Pause Python's cyclic collector while a batch is decoded.

Decoding a batch allocates a few tracked objects per record (msgpack's tuple for the record,
then the record or message built from it), and none of them can be part of a reference cycle.
The collector's youngest generation runs every 700 tracked allocations, so decoding one MiB
batch of 1 KiB records ran it several times, each pass walking the record tuples msgpack had
just made (reference counting frees them moments later anyway) and every message built so far,
and each of those passes moved the survivors on to older generations, walked again there. In a
draining consumer's main thread, collections were a fifth of its time (py-spy; the README gives
the run). msgpack's own README advises turning the collector off while unpacking a large
message.

Paused, the record tuples are freed before any collection sees them, and the messages that
outlive the decode are walked once by the first young collection after it. Nothing is lost:
the collector counts every tracked object allocated meanwhile and runs as soon as it is on again.
``records.decode_checked_batch`` pauses it for each batch it decodes (every reader: feeders,
checkers, consumers); a consumer pauses it over its whole take of a fetch's answer
(``client.fetched_messages``, ``client.vp_messages``), several batches, so that no collection
runs between them: a young collection there walked every message of the batches before, and
every tenth of them walked the older generation too.

``gc.disable`` holds for the whole process, every thread. Pauses may overlap (two consumers in
two threads): a count under a lock ends the pause when the last one ends. A collector that was
already off when the first pause began (the application's choice) is left off; one that the
application turns off during a pause is turned on again when the pause ends.
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
