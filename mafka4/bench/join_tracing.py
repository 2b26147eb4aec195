"""A join trace across a running cluster, for ``bench vp-join``: turned on for one topic on every
read node (the groups they coordinate, the splits they ask for and the controller's stamps those
return), then taken, with the rows the members' processes took of their clients
(``bench.join_member``), and joined into hop times (``mafka4.join_trace`` records the rows,
``bench.join_hops`` reads them).

The parent's sealed end is stored by its leader node into etcd: the bench's own watch of the
topic's VP states stamps it on arrival (``GroupWatch``) and adds it as a ``parent_sealed`` row.
"""

from __future__ import annotations

import time

from mafka4.bench.join_hops import join_hops_ms
from mafka4.bench.rebalance import NS_PER_MS, GroupWatch
from mafka4.clocks import wall_ms_fine
from mafka4.join_trace import JoinRow


class ClusterJoinTrace:
    """The join trace of ``topic`` on the cluster's read nodes, and the members' rows."""

    def __init__(self, connection, topic: str):
        from mafka4.metadata import keys
        from mafka4.virtual.handles import read_node_handle

        self._keys, self._cluster, self.topic = keys, connection.cluster, topic
        nodes = [keys.parse_read_node_liveness(connection.cluster, item.key)
                 for item in connection.store.get_prefix(keys.read_nodes_prefix(connection.cluster))]
        self._nodes = [handle for node in sorted(filter(None, nodes))
                       if (handle := read_node_handle(connection.cluster, node)) is not None]
        self._states = GroupWatch(connection, "", prefix=keys.virtual_partitions_prefix(connection.cluster, topic))
        self._wall_minus_monotonic_ms = 0.0
        self.dropped = 0  # rows the traces could not keep

    def start(self) -> None:
        import ray

        ray.get([node.set_join_trace.remote(self.topic, True) for node in self._nodes])
        # Watch events are stamped on the monotonic clock, rows on the wall clock: the two are
        # read together once, and no clock steps in a trial's seconds.
        self._wall_minus_monotonic_ms = wall_ms_fine() - time.monotonic_ns() / NS_PER_MS

    def take_and_stop(self, parents: list[int], members: dict) -> list[JoinRow]:
        """Every row since ``start``: the read nodes', the ``members``' (``{"rows", "dropped"}``, as
        a trace is taken) and the sealed ends of ``parents`` from the watch; tracing stops."""
        import ray

        self._states.close()
        taken = [members, *ray.get([node.take_join_trace.remote(self.topic) for node in self._nodes])]
        ray.get([node.set_join_trace.remote(self.topic, False) for node in self._nodes])
        self.dropped = sum(t["dropped"] for t in taken)
        rows: list[JoinRow] = [tuple(row) for t in taken for row in t["rows"]]
        parent_keys = {self._keys.virtual_partition(self._cluster, self.topic, vp): vp for vp in parents}
        rows += [("parent_sealed", stamp_ns / NS_PER_MS + self._wall_minus_monotonic_ms, "", str(parent_keys[key]))
                 for stamp_ns, key, value in self._states.events
                 if key in parent_keys and value is not None and value.get("sealed_end_offset") is not None]
        return rows

    def wall_ms(self, monotonic_ns: int) -> float:
        """The wall-clock ms of a ``time.monotonic_ns()`` stamp of this process."""
        return monotonic_ns / NS_PER_MS + self._wall_minus_monotonic_ms

    def hops_ms(self, rows: list[JoinRow], join_ns: int, joiner: str) -> dict[str, float | None]:
        return join_hops_ms(rows, self.wall_ms(join_ns), joiner)

    def rows_after_join(self, rows: list[JoinRow], join_ns: int) -> list[list]:
        """Every row as ``[ms after the join, hop, member, detail]``, in time order: what the hops
        were picked from, for a reader asking what else happened (the other members' syncs)."""
        join_ms = self.wall_ms(join_ns)
        return [[round(ms - join_ms, 1), hop, member, detail]
                for hop, ms, member, detail in sorted(rows, key=lambda row: row[1])]
