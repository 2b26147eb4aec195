"""The runner of ``scenarios/replica_*.txt``: ``ReplicaState`` cores of one physical partition.

Each replica has a core and a model log (the headers of its batches); a follower's ``fetch``
copies batches from its leader's model log, as the replica actor copies bytes.

Commands: ``replicas r0 r1 ... lag= min_isr=``, ``become-leader r epoch= [isr=] [now=]``,
``become-follower r... epoch= leader=``, ``produce r [count=] [pid=] [seq=] [acks=] [now=]``,
``ack r next=``, ``fetch r [max=] [now=]``, ``truncate r epoch= end=``, ``tick r now=``,
``commit-isr r``, ``check-epoch r epoch=``, ``state [r...]``.
"""

from __future__ import annotations

from datadriven import ScenarioRunner
from mafka4.batch_frame import BatchHeader
from mafka4.limits import Acks
from mafka4.limits.servers import ReplicaConfig
from mafka4.log.epochs import EpochHistory
from mafka4.log.producer_state import ProducerStateTable
from mafka4.physical.replica import ReplicaState, Role


def header(base_offset=0, count=1, epoch=-1, producer_id=-1, base_sequence=-1) -> BatchHeader:
    return BatchHeader(base_offset, 100, epoch, 0, 0, count, 0, 0, producer_id, base_sequence)


class ReplicaRunner(ScenarioRunner):
    """Interprets scenario commands against ReplicaState cores and a list of headers per log."""

    def __init__(self):
        self.states: dict[str, ReplicaState] = {}
        self.logs: dict[str, list] = {}

    def do_replicas(self, targets, args):
        config = ReplicaConfig(
            replica_lag_ms_max=int(args.get("lag", 1000)), min_insync_replicas=int(args.get("min_isr", 1))
        )
        for replica_id in targets:
            self.states[replica_id] = ReplicaState(
                replica_id, "orders-1", config, 0, 0, EpochHistory(), ProducerStateTable(5, 100)
            )
            self.logs[replica_id] = []
        return self.do_state(targets, {})

    def do_become_leader(self, targets, args):
        (replica_id,) = targets
        replicas = sorted(self.states)
        isr = args["isr"].split(",") if "isr" in args else replicas
        self.states[replica_id].become_leader(int(args["epoch"]), replicas, isr, int(args.get("now", 0)))
        return self.do_state(targets, {})

    def do_become_follower(self, targets, args):
        for replica_id in targets:
            self.states[replica_id].become_follower(int(args["epoch"]), args["leader"])
        return self.do_state(targets, {})

    def do_produce(self, targets, args):
        (replica_id,) = targets
        state = self.states[replica_id]
        unstamped = header(0, int(args.get("count", 1)), -1, int(args.get("pid", -1)), int(args.get("seq", -1)))
        plan = state.plan_append(unstamped, Acks.parse(args.get("acks", "all")), int(args.get("now", 0)))
        if not plan.duplicate:
            stamped = unstamped._replace(base_offset=plan.base_offset, leader_epoch=plan.leader_epoch)
            self.logs[replica_id].append(stamped)
            state.appended(stamped, int(args.get("now", 0)))
        kind = "duplicate of" if plan.duplicate else "appended at"
        return f"{kind} {plan.base_offset}, ack when hw >= {plan.next_offset}; hw={state.high_watermark}"

    def do_ack(self, targets, args):
        (replica_id,) = targets
        return f"ack_ready={self.states[replica_id].ack_ready(int(args['next']))}"

    def do_fetch(self, targets, args):
        """The follower fetches from its leader; copies at most max= batches."""
        (replica_id,) = targets
        follower = self.states[replica_id]
        leader_state = self.states[follower.leader_id]
        leader_state.check_epoch(follower.leader_epoch)
        decision = leader_state.on_follower_fetch(
            replica_id, follower.log_end_offset, follower.last_fetched_epoch, int(args.get("now", 0))
        )
        if decision.diverging is not None:
            epoch, end_offset = decision.diverging
            return f"diverging: leader says epoch {epoch} ends at {end_offset}"
        batches = [h for h in self.logs[follower.leader_id] if h.base_offset >= follower.log_end_offset]
        for batch in batches[:int(args.get("max", len(batches)))]:
            self.logs[replica_id].append(batch)
            follower.follower_appended(batch)
        follower.follower_high_watermark(decision.high_watermark)
        changed = f"; isr changed to {','.join(sorted(leader_state.isr))}" if decision.ready.write_isr else ""
        return f"leader hw={leader_state.high_watermark}{changed}\n" + self.do_state([replica_id], {})

    def do_truncate(self, targets, args):
        (replica_id,) = targets
        state = self.states[replica_id]
        offset = state.truncation_offset(int(args["epoch"]), int(args["end"]))
        self.logs[replica_id] = [h for h in self.logs[replica_id] if h.base_offset < offset]
        state.truncated(offset)
        return f"truncated to {offset}\n" + self.do_state([replica_id], {})

    def do_tick(self, targets, args):
        (replica_id,) = targets
        state = self.states[replica_id]
        changed = state.tick(int(args["now"])).write_isr is not None
        return f"isr changed={changed} isr={','.join(sorted(state.isr))} hw={state.high_watermark}"

    def do_commit_isr(self, targets, args):
        (replica_id,) = targets
        state = self.states[replica_id]
        state.isr_committed(state.isr, state.leader_epoch)
        return f"committed isr={','.join(sorted(state.isr))} hw={state.high_watermark}"

    def do_check_epoch(self, targets, args):
        (replica_id,) = targets
        self.states[replica_id].check_epoch(int(args["epoch"]))
        return "ok"

    def do_state(self, targets, args):
        lines = []
        for replica_id in targets or sorted(self.states):
            state = self.states[replica_id]
            isr = f" isr={','.join(sorted(state.isr))}" if state.role is Role.LEADER else ""
            epochs = ",".join(f"{epoch}@{start}" for epoch, start in state.epochs.entries) or "-"
            log = " ".join(
                f"[{h.base_offset}..{h.last_offset} e{h.leader_epoch}"
                + (f" p{h.producer_id}s{h.base_sequence}" if h.producer_id >= 0 else "") + "]"
                for h in self.logs[replica_id]
            )
            lines.append(
                f"{replica_id}: {state.role.value} epoch={state.leader_epoch} leo={state.log_end_offset} "
                f"hw={state.high_watermark}{isr} epochs={epochs} log={log or '-'}"
            )
        return "\n".join(lines)
