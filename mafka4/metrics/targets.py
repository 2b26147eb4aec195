"""Where a cluster's processes serve their metrics, and Prometheus's file-based discovery of them (pure).

Each read node and each physical replica names, in its liveness key, where it serves clients
(``"client"``) and, beside it, where it serves Prometheus metrics (``"metrics"``, ``host:port``:
``metrics.exposition``); the active controller names its process's in its election value
(``keys.controller``; a standby's is named once it wins). A liveness value written before metrics existed, or by a process whose
metrics server did not start, has no ``"metrics"``: it is no target, and nothing else changes.

``metrics_targets`` reads the targets from the liveness keys' items (key, JSON value), as
``mafka4 status`` gets them from etcd (under ``liveness_prefixes``, and ``liveness_keys``), and shows them by process
(``targets_by_process``, ``shown_targets`` back); ``file_sd`` turns them into the JSON of Prometheus's
``file_sd_configs``: one entry per process, labelled with the cluster and what the process is
(``process``: ``read_node``, ``replica`` or ``controller``; ``node``, ``topic`` and ``partition`` come from the
metrics themselves, so they are not target labels, which would clash with them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from mafka4.metadata import keys

METRICS_FIELD = "metrics"  # the liveness value's field naming the metrics address


@dataclass(frozen=True, slots=True)
class MetricsTarget:
    """One process serving metrics: ``process`` is ``read_node``, ``replica`` or ``controller``;
    ``name`` the read node's id, ``<topic>-<partition>/<replica id>``, or the controller's id."""

    process: str
    name: str
    address: str


def liveness_prefixes(cluster: str) -> tuple[str, str]:
    """The etcd prefixes of ``cluster``'s liveness keys that may name metrics addresses."""
    return keys.read_nodes_prefix(cluster), keys.replicas_prefix(cluster)


def liveness_keys(cluster: str) -> tuple[str]:
    """The etcd keys (not prefixes) of ``cluster`` that may name a metrics address: the active controller's."""
    return (keys.controller(cluster),)


def metrics_address(liveness: object) -> str | None:
    """The metrics address a liveness value names; None if it names none (an older process's)."""
    return (liveness.get(METRICS_FIELD) or None) if isinstance(liveness, dict) else None


def metrics_targets(cluster: str, items: Iterable[tuple[str, object]]) -> list[MetricsTarget]:
    """The targets of ``cluster`` among liveness ``items`` (key, JSON value) of read nodes, replicas
    and the controller; other keys, and values naming no metrics address, are skipped. Sorted by
    process and name."""
    targets = []
    for key, value in items:
        address = metrics_address(value)
        if address is None:
            continue
        if (node_id := keys.parse_read_node_liveness(cluster, key)) is not None:
            targets.append(MetricsTarget("read_node", node_id, address))
        elif (replica := keys.parse_replica_liveness(cluster, key)) is not None:
            topic, partition, replica_id = replica
            targets.append(MetricsTarget("replica", f"{topic}-{partition}/{replica_id}", address))
        elif key == keys.controller(cluster):
            targets.append(MetricsTarget("controller", str(value.get("controller_id")), address))
    return sorted(targets, key=lambda target: (target.process, target.name))


def targets_by_process(targets: Iterable[MetricsTarget]) -> dict[str, dict[str, str]]:
    """``{process: {name: address}}``, as ``mafka4 status`` shows them."""
    shown: dict[str, dict[str, str]] = {}
    for target in targets:
        shown.setdefault(target.process, {})[target.name] = target.address
    return shown


def shown_targets(shown: dict[str, dict[str, str]]) -> list[MetricsTarget]:
    """The targets ``targets_by_process`` showed."""
    return [MetricsTarget(process, name, address) for process, names in sorted(shown.items())
            for name, address in sorted(names.items())]


def file_sd(cluster: str, targets: Iterable[MetricsTarget]) -> list[dict]:
    """Prometheus ``file_sd_configs`` JSON for ``targets``."""
    return [{"targets": [target.address],
             "labels": {"cluster": cluster, "process": target.process, "mafka4_name": target.name}}
            for target in targets]
