"""What an idle hosted VP replica costs a read node, in process: memory, file descriptors, files.

Issue 37 asks for 100,000 VPs (``read_replicas=1``) on one read node in at most 1 GiB RSS, the
node's own ~100 MB included, so an idle hosted VP replica must cost well under 9 KB; and a node
must not hold a file descriptor per VP file (``ulimit -n``). ``mafka4 bench vp-density`` measures
that on a cluster (Ray, etcd); this microbenchmark measures the VPs alone, in seconds.

It builds ``--vps`` idle VP replicas the way ``ReadNode.host`` does (``ReadNode._open``, then the
role its VP state gives: leader of epoch 0 with itself as the only replica and RISR member): a
``HostedVp`` per VP with the topic's ``topic_log_config`` and ``RisrConfig``, its directory
``vp_directory(data_root, node, vp)`` under a temporary directory, the node's ``LogDirBudget`` and
``VpHousekeeping`` wired as ``on_change`` and ``owe_flush``. ``ReadNode`` is a Ray actor, so a
stand-in (``StandInNode``) holds what the node keeps per VP (its ``_hosted`` map and the change
sequence its ``_on_ready`` writes on a wake); the etcd parts (RISR writes) are never reached with
one replica, and the stand-in refuses them. Then one housekeeping pass runs, as the node's does
within ``housekeeping_interval_ms``, so each VP is as an idle node holds it: HW checkpointed,
visited by no pass.

Reported, per VP (JSON):

* ``rss``: growth of VmRSS (``/proc/self/status``) over the build, after ``gc.collect()``;
* ``tracemalloc``: Python heap bytes per VP, the top allocation sites (file:line) and files,
  measured on a second, traced build of ``--traced-vps`` VPs (tracemalloc slows a build and
  costs memory of its own, so it never runs during the RSS and time build);

Each build runs in a fresh process of its own (``--part``), so that no build reuses the memory of
one before it.
* ``objects``: gc-tracked objects per VP by type, counted over the RSS build;
* ``fds``: open descriptors per VP (``/proc/self/fd``), by the kind of file they name;
* ``files``: files on disk per VP by kind, their bytes and allocated blocks;
* ``create_s``: the wall time of the build (``HostedVp`` constructions and ``become_leader``), and
  of the housekeeping pass.

A tree whose idle VPs hold descriptors may run out of them (``EMFILE``) before ``--vps``: its row
then says after how many VPs (``error``) and holds no other figure. The limit is the process's
(``ulimit -n``); the script does not raise it.

``--ab A_TREE B_TREE`` runs this script alternately on two checkouts (``PYTHONPATH`` set to each,
A B A B ..., ``--repeats`` pairs), recording the load average before each run.

    python3 benchmarks/vp_memory_micro.py --vps 1000 --output out.json
    python3 benchmarks/vp_memory_micro.py --vps 10000 --ab /tmp/base . --repeats 2 --output ab.json

The script imports only ``mafka4`` (no ``benchmarks`` module), so that it runs against any
checkout that has ``HostedVp`` and ``VpHousekeeping``.
"""

from __future__ import annotations

import argparse
import collections
import errno
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from benchmarks.micro_run import quiet_mafka4_logs, write_report
from mafka4.limits import TopicConfig
from mafka4.limits.servers import topic_log_config
from mafka4.log.log_dir_budget import LogDirBudget
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId, vp_directory
from mafka4.virtual.housekeeping import VpHousekeeping
from mafka4.virtual.replica_core import Ready

NODE = "r0"
TOPIC = "density"
NOW_MS = 1_800_000_000_000
TOP_SITES = 15
TRACED_FRAMES = 12  # enough to reach the mafka4 line behind a library allocation


class StandInNode:
    """What a ``ReadNode`` keeps per hosted VP, without Ray or etcd (see the module docstring)."""

    def __init__(self, data_root: Path):
        self.data_root = data_root
        self.hosted: dict[VpId, HostedVp] = {}
        self.budget = LogDirBudget(data_root / NODE, None)  # ReadNodeConfig's default: no bound
        self.housekeeper = VpHousekeeping(self.hosted.get)
        self.change_seq = 0
        self.vp_changed_seq: dict[VpId, int] = {}

    def on_ready(self, hosted: HostedVp, ready: Ready) -> None:
        """``ReadNode._on_ready``'s per-VP part; a RISR write needs etcd, which one replica never asks for."""
        if ready.write_risr is not None:
            raise AssertionError(f"{hosted.vp_id}: a RISR write with one read replica; the stand-in has no etcd")
        if ready.wake:
            self.change_seq += 1
            self.vp_changed_seq[hosted.vp_id] = self.change_seq

    def host(self, topic: str, config: TopicConfig, vps: range, now_ms: int) -> None:
        """``ReadNode.host`` for VPs led here alone: ``_open``, then ``become_leader``."""
        for vp in vps:
            vp_id = VpId(topic, vp)
            directory = vp_directory(self.data_root, NODE, vp_id)
            risr_config = RisrConfig(read_replica_lag_ms_max=config.read_replica_lag_ms_max)
            hosted = HostedVp(vp_id, NODE, directory, topic_log_config(config), risr_config, now_ms,
                              self.on_ready, self.budget, on_change=self.housekeeper.changed,
                              owe_flush=self.housekeeper.owe_flush)
            self.hosted[vp_id] = hosted
            hosted.become_leader(0, [NODE], [NODE], now_ms)

    def housekeep(self, now_ms: int) -> int:
        """One housekeeping pass with retention, its chores on this thread; the VPs it visited."""
        started = self.housekeeper.start(now_ms, retention_due=True)
        for _, chores, _ in started:
            chores.run()
        self.housekeeper.finish(started, now_ms)
        return len(started)

    def close(self) -> None:
        for hosted in self.hosted.values():
            hosted.close()


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status: this measures Linux processes only")


def open_fds_by_kind(under: Path) -> collections.Counter:
    """Open descriptors of this process naming files under ``under``, by kind (``file_kind``)."""
    kinds: collections.Counter = collections.Counter()
    prefix = str(under)
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:
            continue  # the descriptor of the listing itself
        if target.startswith(prefix):
            kinds[file_kind(target)] += 1
    return kinds


def close_descriptors_under(under: Path) -> int:
    """Close every descriptor of this process naming a file under ``under``; how many."""
    prefix, closed = str(under), 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:
            continue
        if target.startswith(prefix):
            os.close(int(name))
            closed += 1
    return closed


def file_kind(path: str) -> str:
    name = os.path.basename(path)
    for suffix in (".log", ".index", ".timeindex", ".tmp"):
        if name.endswith(suffix):
            return suffix
    return name  # recovery-point, leader-epoch-checkpoint, high-watermark, fsync-points


def files_by_kind(root: Path) -> dict[str, dict[str, int]]:
    """Per kind: how many files under ``root``, their bytes and their allocated bytes (st_blocks)."""
    kinds: dict[str, dict[str, int]] = {}
    for directory, _, names in os.walk(root):
        for name in names:
            status = os.stat(os.path.join(directory, name))
            kind = kinds.setdefault(file_kind(name), {"files": 0, "bytes": 0, "allocated_bytes": 0})
            kind["files"] += 1
            kind["bytes"] += status.st_size
            kind["allocated_bytes"] += status.st_blocks * 512
    return kinds


def objects_by_type() -> collections.Counter:
    gc.collect()
    return collections.Counter(type(one).__qualname__ for one in gc.get_objects())


def per_vp(counter: collections.Counter | dict, vps: int, top: int | None = None) -> dict[str, float]:
    rows = sorted(((key, value / vps) for key, value in counter.items() if value), key=lambda row: -row[1])
    return {key: round(value, 3) for key, value in rows[:top]}


def build(vps: int) -> dict:
    config = TopicConfig(read_mode="mafka4", read_replicas=1)
    with tempfile.TemporaryDirectory(prefix="vp-memory-") as root:
        node = StandInNode(Path(root))
        node_dir = Path(root) / NODE
        gc.collect()
        objects_before, rss_before = objects_by_type(), rss_bytes()
        fds_before = len(os.listdir("/proc/self/fd"))
        spare = os.open(os.devnull, os.O_RDONLY)  # for the listing after an EMFILE
        started = time.perf_counter()
        try:
            node.host(TOPIC, config, range(vps), NOW_MS)
        except OSError as error:
            if error.errno != errno.EMFILE:
                raise
            # A tree whose VPs hold descriptors runs out of them: that is the finding.
            os.close(spare)  # listing /proc/self/fd takes a descriptor
            held = close_descriptors_under(node_dir)  # closing the logs would write checkpoints: more
            return {"vps": vps, "error": f"{error.strerror} after {len(node.hosted)} VPs",
                    "fds": {"open_under_node_dir": held, "soft_limit": _soft_fd_limit()}}
        create_s = time.perf_counter() - started
        os.close(spare)
        started = time.perf_counter()
        visited = node.housekeep(NOW_MS + 1)
        housekeeping_s = time.perf_counter() - started
        gc.collect()
        rss_after = rss_bytes()
        fds_after = len(os.listdir("/proc/self/fd"))
        objects_after = objects_by_type()
        fd_kinds = open_fds_by_kind(node_dir)
        files = files_by_kind(node_dir)
        node.close()
    total_files = sum(kind["files"] for kind in files.values())
    return {
        "vps": vps,
        "create_s": round(create_s, 3),
        "create_ms_per_vp": round(create_s * 1000 / vps, 4),
        "housekeeping_s": round(housekeeping_s, 3),
        "housekeeping_visited": visited,
        "rss": {"before_bytes": rss_before, "after_bytes": rss_after,
                "bytes_per_vp": round((rss_after - rss_before) / vps, 1)},
        "objects": {"per_vp": round(sum((objects_after - objects_before).values()) / vps, 2),
                    "per_vp_by_type": per_vp(objects_after - objects_before, vps, TOP_SITES)},
        "fds": {"per_vp": round((fds_after - fds_before) / vps, 3), "per_vp_by_kind": per_vp(fd_kinds, vps),
                "open_total": fds_after, "soft_limit": _soft_fd_limit()},
        "files": {"per_vp": round(total_files / vps, 3),
                  "bytes_per_vp": round(sum(kind["bytes"] for kind in files.values()) / vps, 1),
                  "allocated_bytes_per_vp": round(sum(kind["allocated_bytes"] for kind in files.values()) / vps, 1),
                  "by_kind": {kind: {key: round(value / vps, 3) for key, value in figures.items()}
                              for kind, figures in sorted(files.items())}},
    }


def traced_build(vps: int) -> dict:
    """Python heap per VP over a build of ``vps`` VPs under tracemalloc."""
    config = TopicConfig(read_mode="mafka4", read_replicas=1)
    with tempfile.TemporaryDirectory(prefix="vp-memory-") as root:
        node = StandInNode(Path(root))
        gc.collect()
        tracemalloc.start(TRACED_FRAMES)
        before = tracemalloc.take_snapshot()
        node.host(TOPIC, config, range(vps), NOW_MS)
        node.housekeep(NOW_MS + 1)
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        node.close()
    ours = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
    stats = after.filter_traces(ours).compare_to(before.filter_traces(ours), "traceback")
    sites: collections.Counter = collections.Counter()
    blocks: collections.Counter = collections.Counter()
    files: collections.Counter = collections.Counter()
    for stat in stats:
        site = _site(stat.traceback)
        sites[site] += stat.size_diff
        blocks[site] += stat.count_diff
        files[site.split(":")[0].split(" ")[0]] += stat.size_diff
    return {
        "vps": vps,
        "bytes_per_vp": round(sum(sites.values()) / vps, 1),
        "top_sites": [{"site": site, "bytes_per_vp": round(size / vps, 1), "blocks_per_vp": round(blocks[site] / vps, 2)}
                      for site, size in sites.most_common(TOP_SITES)],
        "top_files": [{"file": file, "bytes_per_vp": round(size / vps, 1)} for file, size in files.most_common(TOP_SITES)],
    }


def _site(traceback: tracemalloc.Traceback) -> str:
    """Where an allocation was made, named by the innermost mafka4 line that led to it (with the
    library line that allocated, when that is not mafka4's): ``file:line``."""
    innermost = traceback[-1]  # frames run from the oldest to the most recent
    ours = next((frame for frame in reversed(traceback) if _short(frame.filename).startswith("mafka4/")), None)
    if ours is None or ours == innermost:
        return f"{_short(innermost.filename)}:{innermost.lineno}"
    return f"{_short(ours.filename)}:{ours.lineno} ({_short(innermost.filename)}:{innermost.lineno})"


def _short(filename: str) -> str:
    """A source file's path from its package root (``mafka4/...``), or its name."""
    parts = Path(filename).parts
    for root in ("mafka4", "benchmarks"):
        if root in parts:
            return str(Path(*parts[len(parts) - 1 - parts[::-1].index(root):]))
    return Path(filename).name


def _soft_fd_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def run_once(args: argparse.Namespace) -> dict:
    results = []
    for vps in args.vps:
        row = _in_fresh_process("rss", vps)
        traced_vps = min(vps, args.traced_vps)
        row["tracemalloc"] = _in_fresh_process("traced", traced_vps) if traced_vps else {"vps": 0}
        results.append(row)
    return {"command": " ".join(sys.argv), "tree": _tree(), "commit": _commit(), "load_average": _load_average(),
            "python": sys.version.split()[0], "results": results}


def _in_fresh_process(part: str, vps: int) -> dict:
    """One build in a process of its own: memory a build before it freed would be reused (pymalloc
    keeps its arenas), and a traced build on top of others would charge them their dicts' growth."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_tree(), os.environ.get("PYTHONPATH")])),
           "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--part", part, "--vps", str(vps)],
                          env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def run_ab(args: argparse.Namespace) -> dict:
    """This script on tree A, then B, ``repeats`` times; each run's JSON and load average."""
    passed = _without_option(_without_option(sys.argv[1:] if args.argv is None else args.argv, "--ab", 2),
                             "--output", 1)
    runs = []
    for repeat in range(args.repeats):
        for side, tree in zip("AB", args.ab):
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "PYTHONDONTWRITEBYTECODE": "1"}
            load = _load_average()
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *passed, "--output", "-"],
                                  env=env, check=True, capture_output=True, text=True, cwd=str(Path(tree).resolve()))
            run = json.loads(done.stdout)
            runs.append({"repeat": repeat + 1, "side": side, "load_average_before": load, **run})
            for row in run["results"]:
                if "error" in row:
                    print(f"{repeat + 1} {side} load {load} {row['vps']:>7} VPs: {row['error']}", file=sys.stderr,
                          flush=True)
                    continue
                print(f"{repeat + 1} {side} load {load} {row['vps']:>7} VPs: RSS {row['rss']['bytes_per_vp']:8.1f} B/VP, "
                      f"heap {row['tracemalloc'].get('bytes_per_vp', 0):8.1f} B/VP, fds {row['fds']['per_vp']:.2f}/VP, "
                      f"files {row['files']['per_vp']:.2f}/VP, create {row['create_ms_per_vp']:.3f} ms/VP",
                      file=sys.stderr, flush=True)
    return {"command": " ".join(sys.argv), "trees": {"A": args.ab[0], "B": args.ab[1]}, "runs": runs}


def _without_option(argv: list[str], option: str, values: int) -> list[str]:
    if option not in argv:
        return argv
    at = argv.index(option)
    return argv[:at] + argv[at + 1 + values:]


def _load_average() -> str:
    """``/proc/loadavg``'s first three fields (1, 5 and 15 minutes)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _tree() -> str:
    import mafka4
    return str(Path(mafka4.__file__).resolve().parent.parent)


def _commit() -> str | None:
    done = subprocess.run(["git", "-C", _tree(), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def _vp_counts(text: str) -> list[int]:
    try:
        counts = [int(value) for value in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give VP counts separated by commas, e.g. 1000,10000") from None
    if not counts or any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: every VP count must be at least 1")
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vps", type=_vp_counts, default=[1000], help="VP counts, e.g. 1000,10000")
    parser.add_argument("--traced-vps", type=int, default=1000,
                        help="VPs of the tracemalloc build (at most --vps; 0: none)")
    parser.add_argument("--ab", nargs=2, metavar=("A_TREE", "B_TREE"), help="alternate runs on two checkouts")
    parser.add_argument("--repeats", type=int, default=2, help="A B pairs with --ab")
    parser.add_argument("--output", default="-", help="JSON file ('-': stdout)")
    parser.add_argument("--part", choices=["rss", "traced"], help=argparse.SUPPRESS)  # one build, in this process
    args = parser.parse_args(argv)
    args.argv = argv
    if args.traced_vps < 0:
        raise SystemExit(f"--traced-vps {args.traced_vps}: give 0 (no traced build) or more")
    with quiet_mafka4_logs():
        if args.part:
            out = build(args.vps[0]) if args.part == "rss" else traced_build(args.vps[0])
        else:
            out = run_ab(args) if args.ab else run_once(args)
    write_report(out, args.output)


if __name__ == "__main__":
    main()
