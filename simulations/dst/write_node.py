"""Write nodes: the machines that host physical-partition replicas.

A ``WriteNode`` hosts one ``physical.SimReplica`` per partition the coordinator asked it to
start (``StartReplica``; ``StopReplica`` closes one), sends heartbeats (its lease) to the
coordinator, ticks its replicas, and crashes as a whole: every replica process dies and its
disk loses what ``SimDisk`` says a power loss loses. After a boot no replica runs until the
coordinator restarts it, as the real controller restarts actors.
"""

from __future__ import annotations

from pathlib import Path

from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env
from simulations.dst.physical import HANDLERS, SimReplica


class WriteNode:
    """One write machine: its replicas, its lease, its crashes."""

    def __init__(self, env: Env, name: str):
        self.env = env
        self.name = name
        self.up = False
        self.replicas: dict[int, SimReplica] = {}
        self.incarnation = 0

    @property
    def directory(self) -> Path:
        return self.env.disk.directory(self.name)

    def boot(self) -> None:
        assert not self.up
        self.up = True
        self.incarnation += 1
        self.env.network.register(self.name, self.handle)
        self._heartbeat(self.incarnation)
        self._tick(self.incarnation)

    def crash(self, power_loss: bool) -> None:
        assert self.up
        self.up = False
        self.env.network.unregister(self.name)
        self.replicas.clear()
        self.env.disk.crash(self.directory, power_loss)

    def stop(self) -> None:
        """A clean shutdown of the machine: every replica closes its log."""
        assert self.up
        self.up = False
        self.env.network.unregister(self.name)
        for replica in self.replicas.values():
            replica.close()
        self.replicas.clear()

    def _heartbeat(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        self.env.network.send(self.name, COORDINATOR, m.Heartbeat(self.name, incarnation, tuple(sorted(self.replicas))))
        self.env.scheduler.after(self.env.jitter(self.env.options.heartbeat_interval_ms),
                                 lambda: self._heartbeat(incarnation))

    def _tick(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        for partition in sorted(self.replicas):
            self.replicas[partition].tick()
        self.env.scheduler.after(self.env.jitter(self.env.options.tick_interval_ms), lambda: self._tick(incarnation))

    def handle(self, source: str, message: object) -> None:
        if isinstance(message, (m.ReplicaFetchResult, m.IsrWriteResult)):
            for partition in sorted(self.replicas):
                self.replicas[partition].on_result(message)
            return
        if isinstance(message, m.StartReplica):
            if message.partition not in self.replicas:
                directory = self.directory / f"t-{message.partition}"
                self.replicas[message.partition] = SimReplica(self.env, self, message.partition, directory)
                self.env.note(f"{self.name} starts p{message.partition} replica "
                              f"(LEO {self.replicas[message.partition].log.log_end_offset})")
            return
        if isinstance(message, m.StopReplica):
            replica = self.replicas.pop(message.partition, None)
            if replica is not None:
                replica.close()
            return
        replica = self.replicas.get(message.partition)
        if replica is None:
            self._refuse(source, message)
            return
        handler = HANDLERS.get(type(message))
        assert handler is not None, f"{self.name} cannot handle {type(message).__name__}"
        handler(replica, source, message)

    def _refuse(self, source: str, message: object) -> None:
        """A call to a replica that does not run here fails as a call to a missing actor."""
        failure = m.Failure("ActorUnavailable", True, f"no replica of that partition runs on {self.name}")
        if isinstance(message, m.Produce):
            self.env.network.send(self.name, source, m.ProduceResult(message.request_id, None, failure))
        elif isinstance(message, m.Fetch):
            self.env.network.send(self.name, source, m.FetchResult(message.request_id, b"", 0, failure))
        elif isinstance(message, m.ReplicaFetch):
            self.env.network.send(self.name, source, m.ReplicaFetchResult(message.request_id, b"", 0, None, failure))
