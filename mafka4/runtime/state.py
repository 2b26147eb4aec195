"""The record of a running local cluster: ``<home>/cluster.json``.

The daemon writes it once etcd and Ray answer (``ready=True``) and removes it when it stops;
``up``/``down``/``status``/``connect`` read it, and so does every client that starts from the
local cluster (``client.bootstrap``): this module imports no code that runs etcd or Ray (the
members it lists are ``runtime.etcd_member`` values). It is written atomically (temp file, fsync,
rename) so a reader sees either the old record or the new one, never half of one. A record
does not prove the cluster is alive: callers check ``daemon_pid``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mafka4.errors import ClusterNotRunning
from mafka4.runtime.etcd_member import LONE_MEMBER_DIR, EtcdServer, etcd_endpoint

STATE_FILE_NAME = "cluster.json"
CLUSTER_NAME_DEFAULT = "local"
STATE_FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class ClusterState:
    home: str
    etcd_endpoint: str  # every member's client address: "127.0.0.1:<port>[,127.0.0.1:<port>...]"
    etcd_pid: int  # the first member's (all of them: etcd_members)
    ray_address: str  # GCS address "127.0.0.1:<port>"
    daemon_pid: int
    ray_temp_dir: str
    write_nodes: tuple[str, ...] = ()
    read_nodes: tuple[str, ...] = ()
    cluster: str = CLUSTER_NAME_DEFAULT
    data_root: str = ""  # default: <home>/data
    ready: bool = False
    version: int = field(default=STATE_FORMAT_VERSION)
    # The read nodes' client addresses, "127.0.0.1:<port>", where a client starts (mafka4.client.bootstrap).
    bootstrap: tuple[str, ...] = ()
    # Every etcd member, in the order of etcd_endpoint. A record written before members were
    # recorded names one etcd: it is read as a lone member in <home>/etcd.
    etcd_members: tuple[EtcdServer, ...] = ()

    def __post_init__(self) -> None:
        # JSON has no tuples: normalise so a loaded state equals the saved one.
        object.__setattr__(self, "write_nodes", tuple(self.write_nodes))
        object.__setattr__(self, "read_nodes", tuple(self.read_nodes))
        object.__setattr__(self, "bootstrap", tuple(self.bootstrap))
        if not self.data_root:
            object.__setattr__(self, "data_root", str(Path(self.home) / "data"))
        members = tuple(m if isinstance(m, EtcdServer) else EtcdServer(**m) for m in self.etcd_members)
        if not members:
            data_dir = Path(self.home) / LONE_MEMBER_DIR
            members = (EtcdServer(self.etcd_pid, int(self.etcd_endpoint.rpartition(":")[2]), str(data_dir),
                                  str(data_dir.with_name(f"{data_dir.name}.log"))),)
        object.__setattr__(self, "etcd_members", members)
        if etcd_endpoint(members) != self.etcd_endpoint or members[0].pid != self.etcd_pid:
            raise ValueError(f"etcd members at {etcd_endpoint(members)} (first pid {members[0].pid}) do not match "
                             f"etcd_endpoint={self.etcd_endpoint!r}, etcd_pid={self.etcd_pid}")

    @property
    def node_ids(self) -> tuple[str, ...]:
        return self.write_nodes + self.read_nodes


def state_path(home: Path) -> Path:
    return Path(home) / STATE_FILE_NAME


def save_state(state: ClusterState) -> Path:
    """Write ``<home>/cluster.json`` atomically; returns its path."""
    path = state_path(Path(state.home))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    record = asdict(state)
    record["write_nodes"] = list(state.write_nodes)
    record["read_nodes"] = list(state.read_nodes)
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(record, file, indent=2, sort_keys=True)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    # The rename is durable only once the directory entry is.
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path


def load_state(home: Path) -> ClusterState | None:
    """The recorded state, or None if there is no record; ClusterNotRunning if it is unreadable."""
    path = state_path(home)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
        if record.get("version") != STATE_FORMAT_VERSION:
            raise ValueError(f"format version {record.get('version')!r}, expected {STATE_FORMAT_VERSION}")
        return ClusterState(**record)
    except (ValueError, TypeError) as error:
        raise ClusterNotRunning(
            f"{path} is not a valid cluster record ({error}); if no cluster runs, delete it"
        ) from error


def remove_state(home: Path) -> bool:
    """Delete the record; False if there was none."""
    try:
        state_path(home).unlink()
    except FileNotFoundError:
        return False
    return True
