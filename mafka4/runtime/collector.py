"""Keep Python's cyclic collector off the objects a mafka4 process holds from its start.

A full collection walks every object the collector tracks. Importing Ray leaves about 56,000 of
them (functions, dicts, types of its modules and of protobuf), and one full collection then
takes 35-70 ms on this machine, more in a process connected to a Ray cluster. A read node
allocates per record (decoding and splitting what it feeds, building fetch answers): fed by a
saturated producer, each of two read nodes ran 48-56 full collections in a 2.5-minute run,
about 120 ms each and up to 350 ms (wall time, the machine loaded by the run). That pause
lands on whatever feed or fetch is under way. (Whether end-to-end tail latency gains is not
established yet: the README gives the runs.)

``freeze_what_start_up_left`` collects once and then moves every object alive into the
collector's permanent generation (``gc.freeze``): collections no longer walk them. Reference
counting still frees each of them as usual; only a reference cycle among them would never be
freed, and the objects a process makes while starting (its modules, its configuration, its
clients) live as long as the process anyway. What the process allocates afterwards is
collected as before.

The read-node actor calls it once it is built; with it, the same runs' full collections took
4-7 ms on average. A replica actor passes batches through as bytes and ran no full collection
in a saturated produce run, so it does not. Only processes mafka4 owns may call it: the
setting holds for the whole process, so an application's own process is the application's to
tune (the README says how, for a consumer).
"""

from __future__ import annotations

import gc


def freeze_what_start_up_left() -> int:
    """Collect once, then keep every object alive now out of later collections; how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
