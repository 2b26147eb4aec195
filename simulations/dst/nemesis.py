"""The fault injector: crashes, restarts and partitions during the chaos phase of a run.

Every ``fault_interval_ms`` on average it picks one fault, which undoes itself after a random
duration:

* a write node crashes (power loss: it loses unflushed data, ``SimDisk.crash``, only while
  every partition is fully in sync, see ``_fully_replicated``; or a process crash) or stops
  cleanly, and boots again later; its replicas come back only when the coordinator restarts
  them;
* a write node is cut off from every other endpoint, from the coordinator only, or from one
  other write node (an asymmetric view of the cluster), then healed;
* a read node crashes (power loss: its VP logs lose their unflushed tails; or a process
  crash) or is cut off; a power loss only while every other read node runs and has recovered
  from its last fault (``_may_lose_read_power``); a feeder or a consumer crashes and restarts
  with empty memory.

At most ``faulty_write_nodes_max`` write nodes are down or cut off at once. ``heal_all``
ends the chaos: every cut link is restored, every process boots, the network stops dropping
and duplicating, and the run drains.

Each fault's beginning and end is reported to ``env.fault_ledger`` (``coverage``), so that
the coverage counters tell elections that follow a fault from start-up ones.
"""

from __future__ import annotations

import dataclasses

from simulations.dst.env import Env

FEEDER_DOWNTIME_MS_MIN = 100  # above any message delay: no call of a dead feeder is still in flight


class Nemesis:
    def __init__(self, env: Env, cluster):
        self.env = env
        self.cluster = cluster
        self._faulty: set[str] = set()
        self._cuts: dict[int, list[tuple[str, str]]] = {}
        self._down: dict[str, object] = {}  # endpoint name -> the process to boot
        self._faults = 0
        # Read nodes crashed or cut off and not recovered since (``_read_recovered``) -> lost power.
        self._read_faulted: dict[str, bool] = {}
        self.counts: dict[str, int] = {}

    def start(self) -> None:
        self.env.scheduler.after(self._interval(), self._fault)

    def _interval(self) -> int:
        mean = self.env.options.fault_interval_ms
        return self.env.rng.randint(mean // 2, mean * 3 // 2)

    def _fault(self) -> None:
        if self.env.now_ms >= self.env.options.chaos_ms:
            return
        rng = self.env.rng
        cluster = self.cluster
        kind = rng.choices(
            ("crash-write", "stop-write", "isolate-write", "cut-coordinator", "cut-pair",
             "crash-read", "isolate-read", "crash-feeder", "crash-consumer"),
            weights=(4, 1, 2, 2, 1, 2, 1, 1, 1),
        )[0]
        healthy_writers = [n for n in cluster.write_nodes if n.up and n.name not in self._faulty]
        may_fault_writer = len(self._faulty) < self.env.options.faulty_write_nodes_max and healthy_writers
        duration_ms = rng.randint(30, 600)
        if kind in ("crash-write", "stop-write") and may_fault_writer:
            node = rng.choice(healthy_writers)
            power_loss = kind == "crash-write" and self.env.options.power_loss and self._fully_replicated() \
                and rng.random() < 0.8
            self._faulty.add(node.name)
            if kind == "stop-write":
                node.stop()
            else:
                node.crash(power_loss)
            self.env.fault_ledger.fault([node.name])
            self._count(f"{kind}{'-power-loss' if power_loss else ''}", f"{node.name} down for {duration_ms} ms")
            self._down_for(node, duration_ms, writer=True)
        elif kind in ("isolate-write", "cut-coordinator", "cut-pair") and may_fault_writer:
            node = rng.choice(healthy_writers)
            if kind == "isolate-write":
                others = cluster.endpoints()
            elif kind == "cut-coordinator":
                others = ["ctl"]
            else:
                others = [rng.choice([n.name for n in cluster.write_nodes if n is not node])]
            self._faulty.add(node.name)
            self._cut(node.name, others, duration_ms, writer=True)
            self._count(kind, f"{node.name} cut from {others if len(others) < 3 else 'everyone'} for {duration_ms} ms")
        elif kind == "crash-read":
            up = [n for n in cluster.read_nodes if n.up]
            node = rng.choice(up) if up else None
            if node is not None:
                power_loss = self.env.options.power_loss and self._may_lose_read_power(node.name)
                node.crash(power_loss)
                self.env.fault_ledger.fault([node.name])
                self._read_faulted[node.name] = power_loss or self._read_faulted.get(node.name, False)
                self._count(f"{kind}{'-power-loss' if power_loss else ''}", f"{node.name} down for {duration_ms} ms")
                self._down_for(node, duration_ms, writer=False)
        elif kind == "isolate-read":
            node = rng.choice(cluster.read_nodes)
            self._read_faulted.setdefault(node.name, False)
            self._cut(node.name, cluster.endpoints(), duration_ms, writer=False)
            self._count(kind, f"{node.name} cut from everyone for {duration_ms} ms")
        elif kind == "crash-feeder":
            up = [f for f in cluster.feeders if f.up]
            if up:
                feeder = rng.choice(up)
                feeder.crash()
                self.env.fault_ledger.fault([feeder.name])
                self._count(kind, f"{feeder.name} restarts")
                self._down_for(feeder, max(duration_ms, FEEDER_DOWNTIME_MS_MIN), writer=False)
        elif kind == "crash-consumer":
            up = [c for c in cluster.consumers if c.up]
            if up:
                consumer = rng.choice(up)
                consumer.crash()
                self.env.fault_ledger.fault([consumer.name])
                self._count(kind, f"{consumer.name} restarts")
                self._down_for(consumer, duration_ms, writer=False)
        self.env.scheduler.after(self._interval(), self._fault)

    def _fully_replicated(self) -> bool:
        """Every partition's ISR (as the coordinator holds it) is its whole replica set.

        A power loss is injected only then: every acknowledged batch is on every replica, so
        losing one machine's unflushed tail must lose nothing acknowledged. Losing the tail
        of the only in-sync replica is data loss by configuration (acks=all with an ISR of
        one, no fsync), not a bug, and is left out.
        """
        return all(set(state.isr) == set(state.replicas) for state in self.cluster.coordinator.partitions.values())

    def _may_lose_read_power(self, name: str) -> bool:
        """Whether read node ``name`` may lose power (its unflushed VP tails), not only its processes.

        With ``read_replicas=1`` too: a VP's only replica serves its unflushed tail and feeds what
        it lost again from the physical log in a new epoch; its readers are told by their fetches'
        epochs and read it again (``risr.state``). Not while another read node is
        down, cut off or not recovered from a fault: replication, not fsync, protects what
        readers saw, so a power loss is survivable while every other replica of its VPs runs
        and holds what it claimed. Other faults may follow a power loss at once: a restarted
        RISR member leaves the RISR, and the longest log leads (``virtual.failover``). Two replicas of one VP
        losing their unflushed tails (seed 622 lost all three read nodes' within 200 ms), or one
        losing it while the other is down, is a double fault nothing can cover (as on the write
        side, see ``_fully_replicated``).
        """
        return not self._faulted_read_nodes().keys() - {name}

    def _faulted_read_nodes(self) -> dict[str, bool]:
        """The read nodes not recovered from a crash or a cut -> whether they lost power."""
        self._read_faulted = {name: lost for name, lost in self._read_faulted.items() if not self._read_recovered(name)}
        return self._read_faulted

    def _read_recovered(self, name: str) -> bool:
        """Read node ``name`` is up, cut from nobody, and every VP whose RISR (as the coordinator
        holds it) names it has a leader leading the coordinator's epoch whose HW ``name``'s log
        reaches again."""
        cluster = self.cluster
        if not next(node for node in cluster.read_nodes if node.name == name).up:
            return False
        if any(link[0] == name for links in self._cuts.values() for link in links):  # see ``_cut``
            return False
        for vp, state in sorted(cluster.coordinator.vps.items()):
            if name not in state.risr:
                continue
            leader, replica = cluster.vp_replica(state.leader, vp), cluster.vp_replica(name, vp)
            if leader is None or replica is None or not leader.core.is_leader:
                return False
            if leader.core.leader_epoch != state.leader_epoch or replica.core.log_end_offset < leader.core.high_watermark:
                return False
        return True

    def _count(self, kind: str, text: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.env.note(f"nemesis: {kind}: {text}")

    def _down_for(self, process, duration_ms: int, writer: bool) -> None:
        self._down[process.name] = process

        def boot() -> None:
            if self._down.pop(process.name, None) is not None:
                process.boot()
                self.env.fault_ledger.fault([process.name])
                self.env.note(f"nemesis: {process.name} boots")
            if writer:
                self._faulty.discard(process.name)

        self.env.scheduler.after(duration_ms, boot)

    def _cut(self, name: str, others, duration_ms: int, writer: bool) -> None:
        self._faults += 1
        fault = self._faults
        links = [(name, other) for other in others if other != name]
        self._cuts[fault] = links
        for a, b in links:
            self.env.network.cut(a, b)
        self.env.fault_ledger.fault(_cut_off(links))

        def heal() -> None:
            links = self._cuts.pop(fault, ())
            for a, b in links:
                self.env.network.uncut(a, b)
            if links:
                self.env.fault_ledger.fault(_cut_off(links))
            if writer:
                self._faulty.discard(name)

        self.env.scheduler.after(duration_ms, heal)

    def heal_all(self) -> None:
        for fault in sorted(self._cuts):
            links = self._cuts.pop(fault)
            for a, b in links:
                self.env.network.uncut(a, b)
            self.env.fault_ledger.fault(_cut_off(links))
        assert self.env.network.cut_links == 0
        for name in sorted(self._down):
            self._down.pop(name).boot()
            self.env.fault_ledger.fault([name])
        self._faulty.clear()
        config = self.env.network.config
        self.env.network.config = dataclasses.replace(config, drop_probability=0.0, duplicate_probability=0.0)
        self.env.note("nemesis: heal everything; the run drains")


def _cut_off(links: list[tuple[str, str]]) -> list[str]:
    """The endpoints a cut is a fault of: the one cut off, and the other end of a single cut link."""
    return sorted({a for a, _ in links} | ({links[0][1]} if len(links) == 1 else set()))
