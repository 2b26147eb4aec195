"""The runner of ``scenarios/risr_*.txt``: one VP's read in-sync replicas (``mafka4.risr.state``).

The runner holds the VP leader's ``RisrState`` and plays the coordinator: the RISR it holds
is the one the leader took office with, then whatever ``commit`` wrote. Time is only what
the commands say (``now=``).

Commands:

* ``lead r0 [replicas=r0,r1,r2] [risr=...] [leo=0] [hw=0] [flushed=leo] [lag=1000] [catch_up=100] [now=0]``:
  ``r0`` takes office; the replicas default to the previous leader's, the RISR to the
  coordinator's (or every replica), the lag bound and catch-up distance to the previous ones;
* ``append leo=N``, ``flush [to=leo]``: the leader's log grew to ``N`` / is durable below ``to``;
* ``fetch r1 at=N now=T``: a follower fetches from offset ``N`` (its log end);
* ``tick now=T``: followers not caught up for over the lag bound leave the RISR;
* ``commit [risr=...]``: the coordinator stores the leader's RISR (or an older one written late);
* ``route g1 g2 ... at=N``: the replica each reader at VP offset ``N`` fetches from;
* ``pick-leader alive=r1,r2 [exclude=r0]``: the next leader among the coordinator's RISR;
* ``state``.

After a command that changes the state it is printed: the leader's line (log end, flushed
offset, HW, RISR, the coordinator's RISR, replicas that left since its last write, whether the
leader is alone and must flush) and one line with each follower's status and log end.
"""

from __future__ import annotations

from datadriven import ScenarioRunner
from mafka4.risr.state import RisrConfig, RisrState, pick_leader

VP_NAME = "orders/v0"


def names(text: str) -> list[str]:
    return [name for name in text.split(",") if name]


def joined(members) -> str:
    return ",".join(sorted(members)) or "-"


class RisrRunner(ScenarioRunner):
    def __init__(self):
        self.state: RisrState | None = None
        self.replicas: tuple[str, ...] = ()
        self.coordinator_risr: frozenset[str] | None = None
        self.config = RisrConfig(read_replica_lag_ms_max=1_000, catch_up_lag_records_min=100)
        self.now_ms = 0

    def do_lead(self, targets, args):
        (leader_id,) = targets
        self.replicas = tuple(names(args["replicas"])) if "replicas" in args else self.replicas
        if "risr" in args:
            risr = frozenset(names(args["risr"]))
        else:
            risr = self.coordinator_risr if self.coordinator_risr is not None else frozenset(self.replicas)
        self.config = RisrConfig(
            read_replica_lag_ms_max=int(args.get("lag", self.config.read_replica_lag_ms_max)),
            catch_up_lag_records_min=int(args.get("catch_up", self.config.catch_up_lag_records_min)),
        )
        self.now_ms = int(args.get("now", self.now_ms))
        log_end_offset = int(args.get("leo", 0))
        self.state = RisrState(
            VP_NAME, self.config, leader_id, self.replicas, risr, log_end_offset, int(args.get("hw", 0)),
            self.now_ms, flushed_offset=int(args.get("flushed", log_end_offset)),
        )
        # The controller wrote this RISR when it chose the leader (the leader is always a member).
        self.coordinator_risr = risr | {leader_id}
        return self.do_state([], {})

    def do_append(self, targets, args):
        self.state.leader_appended(int(args["leo"]))
        return self.do_state([], {})

    def do_flush(self, targets, args):
        self.state.leader_flushed(int(args.get("to", self.state.log_end_offset)))
        return self.do_state([], {})

    def do_fetch(self, targets, args):
        (replica_id,) = targets
        self.now_ms = int(args["now"])
        decision = self.state.on_replica_fetch(replica_id, int(args["at"]), self.now_ms)
        answer = f"hw={decision.high_watermark} serving={decision.serving} risr_changed={decision.risr_changed}"
        return answer + "\n" + self.do_state([], {})

    def do_tick(self, targets, args):
        self.now_ms = int(args["now"])
        return f"risr_changed={self.state.tick(self.now_ms)}\n" + self.do_state([], {})

    def do_commit(self, targets, args):
        risr = frozenset(names(args["risr"])) if "risr" in args else self.state.risr
        self.coordinator_risr = risr
        self.state.risr_committed(risr)
        return self.do_state([], {})

    def do_route(self, targets, args):
        position = int(args["at"])
        lines = []
        for reader_id in targets:
            route = self.state.route_fetch(reader_id, position)
            kind = "catch-up" if route.catching_up else "real-time"
            lines.append(f"{reader_id} at {position} -> {route.replica_id} ({kind})")
        return "\n".join(lines)

    def do_pick_leader(self, targets, args):
        alive, excluded = names(args["alive"]), names(args.get("exclude", ""))
        chosen = pick_leader(self.replicas, self.coordinator_risr, alive, excluded)
        return chosen or "none: no live member of the coordinator's RISR, the VP stays leaderless"

    def do_state(self, targets, args):
        state = self.state
        described = state.describe(self.now_ms)
        leader_line = (
            f"{state.leader_id} leads: leo={state.log_end_offset} flushed={state.flushed_offset} "
            f"hw={state.high_watermark} risr={joined(state.risr)} coordinator={joined(self.coordinator_risr)}"
        )
        if described["risr_removed_unconfirmed"]:
            leader_line += f" left-unconfirmed={joined(described['risr_removed_unconfirmed'])}"
        if state.leader_alone:
            leader_line += " alone" + (" flush-needed" if state.flush_needed else "")
        followers = ", ".join(
            f"{replica} {state.status(replica).value} leo={_offset(state.log_end_offset_of(replica))}"
            for replica in self.replicas if replica != state.leader_id
        )
        return leader_line + ("\n" + followers if followers else "")


def _offset(offset: int | None) -> str:
    return "-" if offset is None else str(offset)
