"""Feeding a round into its VPs, in process: the split, the VP batches and their appends, per MB fed.

``mafka4 bench feed-lag`` needs a cluster and measures everything at once; this microbenchmark
isolates what a read node's event loop spends in one feed round (``PartitionFeed._round``) for
8 and 256 VPs, so a change to the split or to the VP log can be judged in seconds:

1. **Physical batches as the producer makes them**: records go through the producer's own
   ``RecordAccumulator`` and ``PipelineCore`` (which encodes each batch with its key-hash column),
   and each batch is stamped with its base offset as the partition leader stamps it. Keyless
   records (each gets its producer's round-robin hash) or keyed ones (``--keys`` distinct keys),
   ``--message-bytes`` each, ``--batch-records`` a batch, the record timestamps advancing 1 ms
   every ``--records-per-ms``. With ``--without-column`` the batches are encoded as producers
   wrote them before the key-hash column, so the split decodes every record (``route_records``):
   the decoding split, issue 37's reference.
2. **Rounds as a feed stream fetches them**: ``--round-batches`` consecutive batches of one
   physical partition, split by ``feed_plan.plan_round`` and handed to every VP's ``HostedVp.feed``
   (VP batch encoding, the VP log's append, the replica core's bookkeeping), then the feed
   report (``VpReplicaCore.fed``) of each VP that got records, as the stream does.

The VPs have one read replica each (``read_replicas=1``). An fsync the replica core asks for
after an append (a lone leader's) is one a read node runs on its worker thread (``HostedVp``'s
``owe_flush``): here it is only counted, so the figures are the event loop's work, and the VP
logs are written to the page cache of a temporary directory. CPU is this process's (``time.process_time``),
per MB of physical batches fed.

``--profile`` runs the same rounds under cProfile and adds the functions with the most own time
and the inclusive times of the steps named in ``PROFILED_STEPS``. ``--ab A_TREE B_TREE`` runs
this script alternately on two checkouts (``PYTHONPATH`` set to each, A B A B ...,
``--repeats`` pairs), recording the 1-minute load average before each run.

    python3 benchmarks/feed_split_micro.py --output out.json
    python3 benchmarks/feed_split_micro.py --ab /work/main . --repeats 3 --output ab.json

The script imports only ``mafka4`` (no ``benchmarks`` module), so that it runs against any
checkout that has the column split.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.micro_run import quiet_mafka4_logs, write_report
from mafka4.batch_frame import stamp
from mafka4.batch_payload import encode_record_arrays
from mafka4.client.accumulator import RECORD_OVERHEAD_BYTES, RecordAccumulator
from mafka4.client.sender_core import PipelineCore
from mafka4.compression import Codec
from mafka4.limits import MiB, ProducerConfig
from mafka4.limits.servers import FeederConfig, LogConfig
from mafka4.risr.state import RisrConfig
from mafka4.virtual.feed_plan import plan_round
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.layout import TopicLayout

TOPIC = "micro"
NODE = "r0"
PARTITION = 0
PHYSICAL_PARTITIONS = 2
PRODUCER_ID = 4242
# Steps whose inclusive time the profile reports (function names as cProfile shows them).
PROFILED_STEPS = ("plan_round", "split_round", "feed", "vp_batches", "encode_runs", "append", "_execute",
                  "leader_appended", "plan_feed", "fed", "frame_payload")


@dataclass(frozen=True, slots=True)
class Workload:
    """The records fed and how they are cut into batches and rounds."""

    keyed: bool
    message_bytes: int
    batch_records: int
    round_batches: int
    rounds: int
    warmup_rounds: int
    records_per_ms: int
    keys: int
    codec: str
    seed: int
    column: bool  # False: batches as producers wrote them before the key-hash column (the decoding split)

    def __post_init__(self) -> None:
        if min(self.message_bytes, self.batch_records, self.round_batches, self.rounds, self.records_per_ms,
               self.keys) < 1 or self.warmup_rounds < 0:
            raise SystemExit(f"{self}: sizes and counts must be at least 1 (warm-up rounds at least 0)")
        if self.warmup_rounds >= self.rounds:
            raise SystemExit(f"warmup_rounds={self.warmup_rounds} leaves none of rounds={self.rounds} to measure")


def producer_batches(workload: Workload) -> list[bytes]:
    """Stamped physical batches of partition ``PARTITION``, made by the producer's own code."""
    config = ProducerConfig(compression=workload.codec, linger_ms=0, batch_bytes_max=64 * MiB,
                            buffer_bytes_max=64 * MiB)
    accumulator = RecordAccumulator(TOPIC, config, PHYSICAL_PARTITIONS)
    pipeline = PipelineCore(TOPIC, PARTITION, config, lambda: PRODUCER_ID)
    rng = random.Random(workload.seed)
    values = [rng.randbytes(workload.message_bytes) for _ in range(64)]
    keys = [b"key-%d" % index for index in range(workload.keys)]
    batches, base_offset, sent = [], 0, 0
    timestamp_ms = 1_800_000_000_000
    for _ in range(workload.rounds * workload.round_batches):
        for _ in range(workload.batch_records):
            key = rng.choice(keys) if workload.keyed else None
            value = values[sent % len(values)]
            size_bytes = RECORD_OVERHEAD_BYTES + len(value) + (len(key) if key else 0)
            accumulator.append(key, value, PARTITION, timestamp_ms + sent // workload.records_per_ms, None,
                               size_bytes, 0.0)
            sent += 1
        accumulator.close_all()
        (in_flight,) = pipeline.send_new(lambda: accumulator.pop_ready(PARTITION, 0.0))
        produced = in_flight.batch
        if not workload.column:  # the producer's encoding without the column: read nodes decode every record
            produced.encoded = encode_record_arrays(produced.records, produced.first_timestamp_ms,
                                                    produced.max_timestamp_ms, produced.producer_id,
                                                    produced.base_sequence, config.compression)
        batch = bytearray(produced.encoded)
        stamp(batch, base_offset, 0)  # as the partition leader stamps it
        batches.append(bytes(batch))
        pipeline.acknowledged(in_flight, base_offset)
        (answer,) = pipeline.step(0.0).answers
        accumulator.complete(answer.batch, base_offset, None)
        base_offset += workload.batch_records
    return batches


@dataclass(frozen=True, slots=True)
class RoundFigures:
    """What feeding the measured rounds cost."""

    vps: int
    keyed: bool
    column: bool
    rounds: int
    records: int
    physical_mb: float
    feed_calls: int  # chunks handed to HostedVp.feed (a VP batch each, one codec)
    records_per_feed_call: float
    cpu_s: float
    cpu_ms_per_mb: float
    split_cpu_ms_per_mb: float  # plan_round alone
    feed_cpu_ms_per_mb: float  # HostedVp.feed and the feed reports
    wall_ms_per_mb: float
    owed_flushes: int


def feed_rounds(workload: Workload, vps: int, batches: list[bytes], profile: cProfile.Profile | None
                ) -> RoundFigures:
    """Feed ``batches`` round by round into ``vps`` fresh VP leaders; the measured rounds' figures."""
    layout = TopicLayout.initial(PHYSICAL_PARTITIONS, vps)
    feeder = FeederConfig()
    directory = Path(tempfile.mkdtemp(prefix="feed_split_micro-"))
    owed: list[HostedVp] = []
    changed: set = set()
    try:
        served = {}
        for vp in range(vps):
            hosted = HostedVp(VpId(TOPIC, vp), NODE, directory / f"v{vp}", LogConfig(), RisrConfig(), 0,
                              lambda _hosted, _ready: None, on_change=changed.add, owe_flush=owed.append)
            hosted.become_leader(0, [NODE], [NODE], 0)
            served[vp] = hosted
        rounds = [b"".join(batches[start:start + workload.round_batches])
                  for start in range(0, len(batches), workload.round_batches)]
        next_offset, now_ms = 0, 1_800_000_000_000
        split_s = feed_s = wall_s = 0.0
        records = calls = measured_bytes = owed_count = 0
        for number, data in enumerate(rounds):
            measured = number >= workload.warmup_rounds
            if measured and profile is not None:
                profile.enable()
            started_wall, started = time.perf_counter(), time.process_time()
            planned = plan_round(data, PARTITION, layout, next_offset, feeder.feed_records_max, served)
            split_done = time.process_time()
            for vp, hosted in served.items():
                chunks = planned.chunks.get(vp)
                if chunks:
                    for chunk in chunks:
                        hosted.feed(0, chunk, now_ms)
                    hosted.core.fed(0, PARTITION, planned.next_offset, planned.next_offset, now_ms)
            ended = time.process_time()
            ended_wall = time.perf_counter()
            if measured and profile is not None:
                profile.disable()
            if measured:
                split_s += split_done - started
                feed_s += ended - split_done
                wall_s += ended_wall - started_wall
                records += planned.records
                calls += sum(len(chunks) for chunks in planned.chunks.values())
                measured_bytes += len(data)
                owed_count += len(owed)
            owed.clear()  # a read node's worker thread would fsync them now
            changed.clear()
            next_offset, now_ms = planned.next_offset, now_ms + 1
        for hosted in served.values():
            hosted.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    megabytes = measured_bytes / MiB
    return RoundFigures(vps, workload.keyed, workload.column, workload.rounds - workload.warmup_rounds, records,
                        round(megabytes, 3), calls, round(records / max(calls, 1), 2), round(split_s + feed_s, 4),
                        round((split_s + feed_s) * 1000 / megabytes, 3), round(split_s * 1000 / megabytes, 3),
                        round(feed_s * 1000 / megabytes, 3), round(wall_s * 1000 / megabytes, 3), owed_count)


def profile_summary(profile: cProfile.Profile, top: int) -> dict:
    """The ``top`` functions by own time, and the inclusive time of each of ``PROFILED_STEPS``."""
    stats = pstats.Stats(profile)
    total = stats.total_tt or 1e-9
    rows = []
    for (filename, line, name), (_, calls, own, inclusive, _) in stats.stats.items():
        rows.append({"function": f"{Path(filename).name}:{line}({name})", "name": name, "calls": calls,
                     "own_s": round(own, 4), "own_share": round(own / total, 4),
                     "inclusive_s": round(inclusive, 4), "inclusive_share": round(inclusive / total, 4)})
    by_own = sorted(rows, key=lambda row: -row["own_s"])[:top]
    steps = sorted((row for row in rows if row["name"] in PROFILED_STEPS), key=lambda row: -row["inclusive_s"])
    return {"total_s": round(total, 4), "top_own": by_own, "steps": steps}


def run_once(args: argparse.Namespace) -> dict:
    results, profiles = [], {}
    for keyed in args.workloads:
        workload = Workload(keyed == "keyed", args.message_bytes, args.batch_records, args.round_batches, args.rounds,
                            args.warmup_rounds, args.records_per_ms, args.keys, args.codec, args.seed,
                            not args.without_column)
        batches = producer_batches(workload)
        for vps in args.vps:
            profile = cProfile.Profile() if args.profile else None
            figures = feed_rounds(workload, vps, batches, profile)
            results.append(asdict(figures))
            if profile is not None:
                profiles[f"{keyed} {vps} VPs"] = profile_summary(profile, args.profile_top)
    out = {"command": " ".join(sys.argv), "tree": _tree(), "commit": _commit(), "load_average_1m": os.getloadavg()[0],
           "settings": {key: value for key, value in vars(args).items() if key not in ("output", "ab")},
           "results": results}
    if profiles:
        out["profiles"] = profiles
    return out


def run_ab(args: argparse.Namespace) -> dict:
    """This script on tree A, then B, ``repeats`` times; each run's JSON and load average."""
    passed = _without_option(_without_option(sys.argv[1:], "--ab", 2), "--output", 1)
    runs = []
    for repeat in range(args.repeats):
        for side, tree in zip("AB", args.ab):
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "PYTHONDONTWRITEBYTECODE": "1"}
            load = os.getloadavg()[0]
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *passed, "--output", "-"],
                                  env=env, check=True, capture_output=True, text=True, cwd=str(Path(tree).resolve()))
            run = json.loads(done.stdout)
            runs.append({"repeat": repeat + 1, "side": side, "load_average_1m_before": load, **run})
            for row in run["results"]:
                print(f"{repeat + 1} {side} load {load:.2f} {'keyed' if row['keyed'] else 'keyless'} "
                      f"{'' if row['column'] else 'decoding '}{row['vps']:>3} VPs: "
                      f"{row['cpu_ms_per_mb']:7.2f} ms CPU/MB (split {row['split_cpu_ms_per_mb']:.2f}, "
                      f"feed {row['feed_cpu_ms_per_mb']:.2f})", file=sys.stderr, flush=True)
    return {"command": " ".join(sys.argv), "trees": {"A": args.ab[0], "B": args.ab[1]}, "runs": runs}


def _without_option(argv: list[str], option: str, values: int) -> list[str]:
    if option not in argv:
        return argv
    at = argv.index(option)
    return argv[:at] + argv[at + 1 + values:]


def _tree() -> str:
    import mafka4
    return str(Path(mafka4.__file__).resolve().parent.parent)


def _commit() -> str | None:
    done = subprocess.run(["git", "-C", _tree(), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vps", type=lambda text: [int(v) for v in text.split(",")], default=[8, 256])
    parser.add_argument("--workloads", type=lambda text: text.split(","), default=["keyless", "keyed"],
                        help="keyless,keyed")
    parser.add_argument("--message-bytes", type=int, default=1024)
    parser.add_argument("--batch-records", type=int, default=64, help="records per physical batch")
    parser.add_argument("--round-batches", type=int, default=8, help="physical batches per feed round")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup-rounds", type=int, default=20)
    parser.add_argument("--records-per-ms", type=int, default=16, help="records a producer sends per ms of timestamp")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys of the keyed workload")
    parser.add_argument("--codec", default="none", choices=[str(codec) for codec in Codec])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--without-column", action="store_true",
                        help="batches without the key-hash column: the read node's decoding split")
    parser.add_argument("--profile", action="store_true", help="run under cProfile and add its summary")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--ab", nargs=2, metavar=("A_TREE", "B_TREE"), help="alternate runs on two checkouts")
    parser.add_argument("--repeats", type=int, default=2, help="A B pairs with --ab")
    parser.add_argument("--output", default="-", help="JSON file ('-': stdout)")
    args = parser.parse_args(argv)
    if any(workload not in ("keyless", "keyed") for workload in args.workloads):
        raise SystemExit(f"--workloads {','.join(args.workloads)}: give keyless, keyed or both")
    with quiet_mafka4_logs():
        out = run_ab(args) if args.ab else run_once(args)
    write_report(out, args.output)


if __name__ == "__main__":
    main()
