"""The runner of ``scenarios/reshard_*.txt``: split epochs (``virtual.layout``) and the feed streams around them.

Hashes are written as fractions of the hash space (``1/4`` is ``2**62``); a key's hash is
printed to three decimals. The runner also models, per physical partition, the committed
records (``produce``) and one feed stream handing them to the VPs as ``feed_plan`` decides, and
per VP its log, its ``FeedProgress`` and the ``fed_through`` it last heard. A closed VP is
sealed (its log end recorded as its sealed end) once what it heard passes its closing cut.

Layout commands:

* ``topic partitions=P vps=V``: epoch 0;
* ``split vp=N cut=c0,c1,.. [fed=..]``, ``merge vps=A,B cut=.. [fed=..]``: plan and store an
  epoch; ``fed`` (what the feeders already fed) defaults to where each stream stands;
* ``locate p=N at=o1,o2,.. hash=h1,h2,..``: the epoch and VP of each (offset, hash);
* ``bounds vp=N``: per partition, the physical offsets that may feed the VP;
* ``sealed vp=N [fed=..]``: whether the VP is sealed given what its feeders fed (default: what it heard);
* ``readable [committed=vp:offset,..] [sealed=vp:end,..] [retired=..]``: what a group may read and
  still has to read; ``sealed`` defaults to the sealed ends recorded so far;
* ``scale-step vps=N``: the next split or merge toward ``N`` active VPs.

Feed commands:

* ``produce p=N keys=a,b,..``: one committed batch of keyed records;
* ``feed p=N``: one round from where the stream stands to the partition's end;
* ``hold p=N vps=..``: a reshard asks the stream to hold back these VPs' records;
* ``release p=N``: the reshard ends; with its epoch stored the stream goes back to the offered cut,
  without it the stream resumes;
* ``lose vp=N keep=K``: a VP leader failover keeps only the first ``K`` records of the VP's log,
  and every stream resumes before its next round (it sees the new leader epoch);
* ``resume p=N``: the stream restarts at ``feed_plan.resume_point`` (``feed`` does it when needed);
* ``served``, ``logs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from datadriven import ScenarioRunner
from mafka4 import batch_frame, batch_payload
from mafka4.hashing import key_hash
from mafka4.virtual.feed_plan import plan_round, resume_point, served_vps, withhold
from mafka4.virtual.layout import MergeStep, SplitEpoch, SplitStep, TopicLayout, next_scale_step
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_records import NOTHING_APPLIED, FeedProgress, SourcedRecord

# Enough for any round of a scenario: a round hands each VP its records in one chunk.
RECORDS_PER_CALL = 1_000


def ints(text: str) -> list[int]:
    return [int(word) for word in text.split(",") if word]


def offsets_by_vp(text: str) -> dict[int, int]:
    return {int(vp): int(offset) for vp, offset in (pair.split(":") for pair in text.split(",") if pair)}


def hash_at(text: str) -> int:
    """``1/4`` -> a quarter of the hash space."""
    position = Fraction(text)
    assert 0 <= position < 1, f"a hash is a fraction of the hash space in [0, 1), not {text}"
    return int(position * HASH_SPACE)


def hash_text(hash_value: int) -> str:
    """A range bound as a short exact fraction, or any hash to three decimals."""
    position = Fraction(hash_value, HASH_SPACE)
    return str(position) if position.denominator <= 1024 else f"{float(position):.3f}"


def range_text(hash_range: HashRange) -> str:
    return f"[{hash_text(hash_range.start)}, {hash_text(hash_range.end)})"


@dataclass(slots=True)
class FeedStream:
    """Where one partition's feed stream stands (``next_offset`` None: it must resume first)."""

    next_offset: int | None = 0
    fed_high: int = 0
    held_vps: frozenset[int] = frozenset()
    withhold_from: int | None = None  # the offered cut, once the hold is reached


class ReshardRunner(ScenarioRunner):
    def __init__(self):
        self.layout: TopicLayout | None = None
        self.batches: dict[int, bytearray] = {}
        self.ends: dict[int, int] = {}
        self.streams: dict[int, FeedStream] = {}
        self.logs: dict[int, list[SourcedRecord]] = {}
        self.progress: dict[int, FeedProgress] = {}
        self.heard: dict[int, list[int]] = {}  # per VP, the fed_through it heard for each partition
        self.sealed_ends: dict[int, int] = {}

    # --- layout -------------------------------------------------------------------------

    def do_topic(self, targets, args):
        partitions = int(args["partitions"])
        self.layout = TopicLayout.initial(partitions, int(args["vps"]))
        for partition in range(partitions):
            self.batches[partition], self.ends[partition] = bytearray(), 0
            self.streams[partition] = FeedStream()
        self._open_vps(self.layout.current)
        ranges = ", ".join(f"{vp} {range_text(r)}" for r, vp in self.layout.current.ranges.items())
        return f"epoch 0: vps {ranges}"

    def do_split(self, targets, args):
        cut = ints(args["cut"])
        return self._store(self.layout.plan_split(int(args["vp"]), cut, self._fed(args)))

    def do_merge(self, targets, args):
        first, second = ints(args["vps"])
        cut = ints(args["cut"])
        return self._store(self.layout.plan_merge(first, second, cut, self._fed(args)))

    def do_locate(self, targets, args):
        partition = int(args["p"])
        lines = []
        for offset in ints(args["at"]):
            for text in args["hash"].split(","):
                epoch, vp = self.layout.locate(partition, offset, hash_at(text))
                lines.append(f"p{partition} offset {offset} hash {text} -> epoch {epoch} vp {vp}")
        return "\n".join(lines)

    def do_bounds(self, targets, args):
        vp = int(args["vp"])
        bounds = (self.layout.source_bounds(vp, p) for p in range(self.layout.partitions))
        return " ".join(f"p{p} [{first}, {'open' if end is None else end})" for p, (first, end) in enumerate(bounds))

    def do_sealed(self, targets, args):
        vp = int(args["vp"])
        fed = ints(args["fed"]) if "fed" in args else self.heard[vp]
        return f"vp {vp} fed through {_joined(fed)}: sealed={self.layout.is_sealed(vp, fed)}"

    def do_readable(self, targets, args):
        committed = offsets_by_vp(args.get("committed", ""))
        sealed = offsets_by_vp(args["sealed"]) if "sealed" in args else self.sealed_ends
        retired = frozenset(ints(args.get("retired", "")))
        readable = self.layout.readable_vps(committed, sealed, retired)
        to_read = self.layout.consumable_vps(committed, sealed, retired)
        return f"readable {_joined(sorted(readable))}; still to read {_joined(to_read)}"

    def do_scale_step(self, targets, args):
        step = next_scale_step(self.layout, int(args["vps"]))
        if isinstance(step, SplitStep):
            return f"split vp {step.vp} {range_text(self.layout.current.ranges.range_of(step.vp))}"
        if isinstance(step, MergeStep):
            return f"merge vps {step.first} and {step.second}"
        return "none: the count is reached"

    # --- feed streams -------------------------------------------------------------------

    def do_produce(self, targets, args):
        partition, keys = int(args["p"]), args["keys"].split(",")
        base_offset = self.ends[partition]
        batch = bytearray(batch_payload.encode_batch([(key.encode(), b"", 0, None) for key in keys]))
        batch_frame.stamp(batch, base_offset, 0)
        self.batches[partition] += batch
        self.ends[partition] += len(keys)
        hashes = ", ".join(f"{key} {hash_text(key_hash(key.encode()))}" for key in keys)
        return f"p{partition} offsets {base_offset}..{self.ends[partition] - 1}: {hashes}"

    def do_feed(self, targets, args):
        partition = int(args["p"])
        stream = self.streams[partition]
        lines = [self._resume(partition)] if stream.next_offset is None else []
        if stream.next_offset is None:
            return "\n".join(lines)
        served = served_vps(self.layout, self.sealed_ends)
        planned = plan_round(bytes(self.batches[partition]), partition, self.layout, stream.next_offset,
                             RECORDS_PER_CALL, served)
        chunks = planned.chunks
        if stream.withhold_from is not None:
            chunks = withhold(chunks, stream.held_vps, stream.withhold_from)
            held_back = [r for vp in stream.held_vps for c in planned.chunks.get(vp, ()) for r in c
                         if r.offset >= stream.withhold_from]
            if held_back:
                lines.append(f"held back: {_records(held_back)}")
        for vp in served:
            got = [r for chunk in chunks.get(vp, ()) for r in chunk]
            fresh = self.progress[vp].unapplied(got)
            self.logs[vp].extend(fresh)
            self.progress[vp].applied(fresh)
            if got:
                repeats = [r for r in got if r not in fresh]
                dropped = f" (already in its log: {_records(repeats)})" if repeats else ""
                lines.append(f"vp {vp} <- {_records(fresh) or '-'}{dropped}")
            told = planned.next_offset
            if vp in stream.held_vps and stream.withhold_from is not None:
                told = min(told, stream.withhold_from)
            self.heard[vp][partition] = max(self.heard[vp][partition], told)
        stream.next_offset = planned.next_offset
        lines.append(f"p{partition} next_offset={stream.next_offset}")
        return "\n".join(lines + self._offer_cut(partition) + self._seal())

    def do_hold(self, targets, args):
        partition = int(args["p"])
        stream = self.streams[partition]
        assert not stream.held_vps, f"p{partition} is already held"
        stream.held_vps = frozenset(ints(args["vps"]))
        return "\n".join(self._offer_cut(partition) or [
            f"p{partition} cannot cut at {stream.next_offset} yet: a VP holds records up to {stream.fed_high - 1}"
        ])

    def do_release(self, targets, args):
        partition = int(args["p"])
        stream = self.streams[partition]
        stored = any(not self.layout.is_active(vp) for vp in stream.held_vps)
        offered = stream.withhold_from
        stream.held_vps, stream.withhold_from = frozenset(), None
        if not stored or offered is None:
            return f"p{partition} leaves the hold without an epoch\n" + self._resume(partition)
        stream.fed_high = max(stream.fed_high, stream.next_offset)
        stream.next_offset = min(stream.next_offset, offered)
        return "\n".join([f"p{partition} adopts epoch {self.layout.current.epoch}: back to {stream.next_offset}"]
                         + self._seal())

    def do_lose(self, targets, args):
        vp, kept = int(args["vp"]), int(args["keep"])
        assert not any(stream.held_vps for stream in self.streams.values()), "not modelled: a failover during a hold"
        self.logs[vp] = self.logs[vp][:kept]
        self.progress[vp] = FeedProgress()
        self.progress[vp].applied(self.logs[vp])
        self.heard[vp] = [0] * self.layout.partitions  # the new leader never heard the stream's reports
        for stream in self.streams.values():  # each stream sees the VP's new leader epoch
            stream.next_offset = None
        return self._log_line(vp) + "\nevery stream resumes before its next round"

    def do_resume(self, targets, args):
        return self._resume(int(args["p"]))

    def do_served(self, targets, args):
        return f"served {_joined(served_vps(self.layout, self.sealed_ends))}"

    def do_logs(self, targets, args):
        return "\n".join(self._log_line(vp) for vp in sorted(self.logs))

    # --- internals ----------------------------------------------------------------------

    def _store(self, epoch: SplitEpoch) -> str:
        self.layout = self.layout.append(epoch)
        self._open_vps(epoch)
        ranges = self.layout.current.ranges
        children = " + ".join(f"{vp} {range_text(ranges.range_of(vp))}" for vp in epoch.children)
        active = ", ".join(f"{vp} {range_text(r)}" for r, vp in ranges.items())
        change = (f"vp {epoch.parents[0]} -> {children}" if len(epoch.parents) == 1
                  else f"vps {epoch.parents[0]} + {epoch.parents[1]} -> {children}")
        # A parent whose feeders already passed the cut is complete at once: the node checks on a layout change.
        lines = [f"epoch {epoch.epoch} from {_joined(epoch.cut)}: {change}", f"active: {active}"]
        return "\n".join(lines + self._seal())

    def _open_vps(self, epoch: SplitEpoch) -> None:
        for vp in epoch.children:
            self.logs[vp], self.progress[vp] = [], FeedProgress()
            self.heard[vp] = [0] * self.layout.partitions

    def _fed(self, args) -> list[int]:
        """What the feeders fed under the current epoch: the offered cut of a held stream, else its position."""
        if "fed" in args:
            return ints(args["fed"])
        return [stream.next_offset if stream.withhold_from is None else stream.withhold_from
                for stream in self.streams.values()]

    def _offer_cut(self, partition: int) -> list[str]:
        """A held stream offers its position as the cut once no VP holds a record at or past it."""
        stream = self.streams[partition]
        if not stream.held_vps or stream.withhold_from is not None or stream.next_offset is None:
            return []
        if stream.next_offset < stream.fed_high:
            return []
        stream.withhold_from = stream.next_offset
        held = sorted(stream.held_vps)
        return [f"p{partition} offers cut {stream.withhold_from}: holds back {'vp' if len(held) == 1 else 'vps'} "
                f"{_joined(held)} from there"]

    def _resume(self, partition: int) -> str:
        stream = self.streams[partition]
        positions = {vp: self.progress[vp].last_applied(partition) for vp in served_vps(self.layout, self.sealed_ends)}
        point = resume_point(self.layout, partition, positions)
        stream.next_offset = None if point is None else point.next_offset
        stream.fed_high = 0 if point is None else point.fed_high
        last_applied = ", ".join(
            f"vp {vp} {'none' if offset == NOTHING_APPLIED else offset}" for vp, offset in positions.items())
        if point is None:
            return f"p{partition} has nothing to feed (last applied: {last_applied})"
        return f"p{partition} resumes at {point.next_offset}, fed_high {point.fed_high} (last applied: {last_applied})"

    def _seal(self) -> list[str]:
        lines = []
        for vp in served_vps(self.layout, self.sealed_ends):
            if self.layout.is_sealed(vp, self.heard[vp]):
                self.sealed_ends[vp] = len(self.logs[vp])
                lines.append(f"vp {vp} sealed at end offset {self.sealed_ends[vp]}")
        return lines

    def _log_line(self, vp: int) -> str:
        state = "active" if self.layout.is_active(vp) else (
            f"sealed at {self.sealed_ends[vp]}" if vp in self.sealed_ends else "closed")
        return f"vp {vp} ({state}): {_records(self.logs[vp]) or '-'}"


def _joined(numbers) -> str:
    return ",".join(map(str, numbers)) or "-"


def _records(vp_records) -> str:
    return " ".join(f"p{r.partition}:{r.offset}:{r.key.decode()}" for r in vp_records)
