"""``ControllerCounters``: what one controller process decided, counted for Prometheus (pure).

Every controller process (active or standby: ``coordinator.control.controller``) keeps one and
serves it (``metrics.families.controller_families``) from the metrics server its process starts
(``runtime.controller_process``). It counts, since the process started:

* ``elections_won``: the controller elections this process won (each is a failover of the
  controller to it, or the cluster's first controller); ``controller_epoch`` is the epoch of its
  last win, and ``active`` whether it is the active controller now;
* ``leader_elections`` by kind: a new leader (epoch) written for a physical partition
  (``partition``) or a VP (``vp``) by a failover or repair;
* ``reshards`` by kind: ``split``, ``merge`` and ``open_lane`` epochs stored;
* ``read_node_scaling`` by kind: the read-node scaling decisions (``add``, ``release``, ``hold``).

The controller's loop, its intent worker and its upkeep count from their own threads: a lock
keeps each count exact. A counter only grows; ``snapshot`` copies them.
"""

from __future__ import annotations

import threading

LEADER_ELECTION_KINDS = ("partition", "vp")
RESHARD_KINDS = ("split", "merge", "open_lane")
READ_NODE_SCALING_KINDS = ("add", "release", "hold")


class ControllerCounters:
    """The counts of one controller process; see the module docstring."""

    def __init__(self, controller_id: str):
        self.controller_id = controller_id
        self._lock = threading.Lock()
        self._elections_won = 0
        self._controller_epoch: int | None = None
        self._active = False
        self._by_kind: dict[str, dict[str, int]] = {
            "leader_elections": dict.fromkeys(LEADER_ELECTION_KINDS, 0),
            "reshards": dict.fromkeys(RESHARD_KINDS, 0),
            "read_node_scaling": dict.fromkeys(READ_NODE_SCALING_KINDS, 0)}

    def won(self, controller_epoch: int) -> None:
        """This process won the election with ``controller_epoch``."""
        with self._lock:
            self._elections_won += 1
            self._controller_epoch, self._active = controller_epoch, True

    def stepped_down(self) -> None:
        with self._lock:
            self._active = False

    def leader_elected(self, kind: str) -> None:
        self._count("leader_elections", kind)

    def resharded(self, kind: str) -> None:
        self._count("reshards", kind)

    def read_node_scaling_decided(self, kind: str) -> None:
        self._count("read_node_scaling", kind)

    def _count(self, counter: str, kind: str) -> None:
        counts = self._by_kind[counter]
        assert kind in counts, f"{counter}: kind {kind!r} is none of {sorted(counts)}"
        with self._lock:
            counts[kind] += 1

    def snapshot(self) -> dict:
        """A plain copy: ``controller_id``, ``active``, ``controller_epoch`` (None before a win),
        ``elections_won`` and the counts by kind."""
        with self._lock:
            return {"controller_id": self.controller_id, "active": self._active,
                    "controller_epoch": self._controller_epoch, "elections_won": self._elections_won,
                    **{counter: dict(counts) for counter, counts in self._by_kind.items()}}


def reshard_kind(parents: int, children: int) -> str:
    """``split``, ``merge`` or ``open_lane``: what a reshard of ``parents`` VPs into ``children`` is."""
    assert children >= 1 and parents != children, (parents, children)
    if parents == 0:
        return "open_lane"
    return "split" if children > parents else "merge"
