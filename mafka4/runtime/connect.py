"""How a driver (client, CLI, test, experiment) joins a running cluster.

An existing cluster is named by ``$MAFKA4_ETCD_ENDPOINT`` and ``$MAFKA4_RAY_ADDRESS`` (both,
or neither); otherwise the local cluster recorded in ``<home>/cluster.json`` is used. The
driver joins Ray in namespace "mafka4" so named actors are shared by every driver.

A local cluster's Ray admits only holders of its token (``<home>/ray_token``,
``runtime.environment``), which the driver presents. Joined through the environment variables,
the driver presents what Ray's own variables name (``RAY_AUTH_MODE=token`` with
``RAY_AUTH_TOKEN_PATH`` or ``RAY_AUTH_TOKEN``), if anything.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from mafka4.errors import ClusterNotRunning
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.environment import apply_ray_environment, mafka4_home, ray_token_path, use_ray_token
from mafka4.runtime.state import CLUSTER_NAME_DEFAULT, ClusterState, load_state
from mafka4.transport.ray_names import NAMESPACE

ETCD_ENDPOINT_ENV = "MAFKA4_ETCD_ENDPOINT"
RAY_ADDRESS_ENV = "MAFKA4_RAY_ADDRESS"
CLUSTER_ENV = "MAFKA4_CLUSTER"


@dataclass(frozen=True, slots=True)
class Connection:
    cluster: str
    store: MetadataStore
    state: ClusterState | None  # None when joined through the environment variables


def connect(home: Path | None = None) -> Connection:
    """Open the metadata store and join Ray (unless this process already has).

    Raises ClusterNotRunning if no cluster is recorded in ``home`` or its daemon is dead.
    """
    etcd_endpoint, ray_address = os.environ.get(ETCD_ENDPOINT_ENV), os.environ.get(RAY_ADDRESS_ENV)
    if bool(etcd_endpoint) != bool(ray_address):
        raise ClusterNotRunning(f"set both {ETCD_ENDPOINT_ENV} and {RAY_ADDRESS_ENV} to join a cluster, or neither")
    state = None
    cluster = os.environ.get(CLUSTER_ENV, CLUSTER_NAME_DEFAULT)
    token_path = None
    if not etcd_endpoint:
        state = _local_state(Path(home) if home is not None else mafka4_home())
        etcd_endpoint, ray_address, cluster = state.etcd_endpoint, state.ray_address, state.cluster
        token_path = ray_token_path(Path(state.home))
    join_ray(ray_address, token_path)
    return Connection(cluster=cluster, store=MetadataStore(etcd_endpoint), state=state)


def _local_state(home: Path) -> ClusterState:
    from mafka4.runtime.local import daemon_alive  # local imports psutil; keep it off the env path

    home = home.expanduser().resolve()
    state = load_state(home)
    if state is None or not state.ready or not daemon_alive(state):
        raise ClusterNotRunning(f"no local cluster at {home}: start one with 'mafka4 up'")
    return state


def join_ray(ray_address: str, token_path: Path | None = None) -> None:
    """Join the Ray at ``ray_address`` in namespace "mafka4" (presenting the token at ``token_path``, if
    given, else what Ray's own variables name); ClusterNotRunning if this process joined another."""
    apply_ray_environment()
    import ray  # after the environment: Ray reads it at import

    if ray.is_initialized():
        joined = ray.get_runtime_context().gcs_address
        if joined != ray_address:
            raise ClusterNotRunning(
                f"this process is already connected to Ray at {joined}, not {ray_address}; "
                f"call ray.shutdown() first"
            )
        return
    if token_path is not None:
        use_ray_token(token_path)
    ray.init(address=ray_address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
    # Ray builds its serialization context at a process's first call or put, importing pyarrow and
    # pydantic on the way: 0.4-0.55 s here. Built now, that is part of connecting, instead of a
    # stall of a Producer's first messages or a consumer's first rebalance.
    ray.put(None)
