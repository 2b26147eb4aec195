"""What many idle group members cost the cluster: ``python idle_members.py --members 1000 ...``.

Starts ``--processes`` processes, each holding its share of ``--members`` consumers (``Consumer``,
thin clients of the ports) of a mafka3-mode topic, ``--per-group`` members to a group. Each
process joins its members, polls every one of them until their groups settle (``--settle-s``
after its last join), then stops polling: from then on a member only heartbeats to its
coordinator. Once every process says so, the CPU the cluster's processes spend is summed from
/proc over ``--window-s`` seconds (etcd, the read nodes' and replicas' actors, the controller,
the raylets and GCS: every process of this user but the members and this script), and compared
with the same window measured before the members started. One JSON line goes to ``--out``.
Run it against a running local cluster (``MAFKA4_HOME``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TICK_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return total / TICK_S


def cluster_pids(exclude: set[int]) -> list[int]:
    me = os.getpid()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in exclude and int(entry.name) != me:
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(part in command for part in ("etcd", "ray::", "raylet", "gcs_server", "mafka4.runtime", "controller")):
                pids.append(int(entry.name))
    return pids


def kind_of(pid: int) -> str:
    """Which part of the cluster ``pid`` is: etcd, a read node, a replica, or the rest (Ray's own, the controller)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    for kind, mark in (("etcd", "etcd"), ("read_nodes", "ray::ReadNode"), ("replicas", "ray::PhysicalPartition")):
        if mark in command:
            return kind
    return "rest"


def window(pids: list[int], seconds: float) -> dict[str, float]:
    """CPU seconds each kind of process spent over ``seconds``, and their sum ("all")."""
    kinds = {pid: kind_of(pid) for pid in pids}
    before = {pid: cpu_s([pid]) for pid in pids}
    time.sleep(seconds)
    spent: dict[str, float] = {}
    for pid in pids:
        spent[kinds[pid]] = spent.get(kinds[pid], 0.0) + cpu_s([pid]) - before[pid]
    spent["all"] = sum(spent.values())
    return {kind: round(value, 2) for kind, value in sorted(spent.items())}


def wait_quiet(below: float | None) -> None:
    deadline = time.monotonic() + 600
    while below is not None and os.getloadavg()[0] >= below and time.monotonic() < deadline:
        time.sleep(5)


def member_process(args) -> None:
    from mafka4.client.consumer import Consumer

    consumers = []
    started = time.monotonic()
    for i in range(args.first, args.first + args.count):
        consumers.append(Consumer(args.topic, group=f"{args.topic}-g{i // args.per_group}",
                                  member_lease_ttl_s=args.ttl_s, fetch_wait_ms_max=60_000))
    joined_s = time.monotonic() - started
    settle_until = time.monotonic() + args.settle_s
    while time.monotonic() < settle_until:
        for consumer in consumers:
            consumer.poll(timeout_ms=0)
        time.sleep(0.05)
    Path(args.ready).write_text(json.dumps({"members": len(consumers), "joined_s": round(joined_s, 1)}))
    time.sleep(3600)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--per-group", type=int, default=10)
    parser.add_argument("--topic", default="idle-members")
    parser.add_argument("--ttl-s", type=int, default=10)
    parser.add_argument("--settle-s", type=float, default=20)
    parser.add_argument("--window-s", type=float, default=60)
    parser.add_argument("--out", default="idle_members_runs.jsonl")
    # Wait (up to 10 min) for the 1-minute load to fall below this before each window: the joins load the
    # machine, and a window measured right after them counts the joins' tail (added after stop 47).
    parser.add_argument("--quiet-load", type=float, default=None)
    parser.add_argument("--member-process", action="store_true")
    parser.add_argument("--first", type=int)
    parser.add_argument("--count", type=int)
    parser.add_argument("--ready")
    args = parser.parse_args()
    if args.member_process:
        member_process(args)
        return
    wait_quiet(args.quiet_load)
    baseline_pids = cluster_pids(set())
    load_before = os.getloadavg()[0]
    baseline_s = window(baseline_pids, args.window_s)
    share = args.members // args.processes
    ready = [Path(f"/tmp/idle-members-{i}.ready") for i in range(args.processes)]
    for path in ready:
        path.unlink(missing_ok=True)
    children = [subprocess.Popen([sys.executable, __file__, "--member-process", "--topic", args.topic,
                                  "--per-group", str(args.per_group), "--ttl-s", str(args.ttl_s),
                                  "--settle-s", str(args.settle_s), "--first", str(i * share), "--count", str(share),
                                  "--ready", str(path)])
                for i, path in enumerate(ready)]
    try:
        while not all(path.exists() for path in ready):
            assert all(child.poll() is None for child in children), "a member process ended"
            time.sleep(1)
        joined = [json.loads(path.read_text()) for path in ready]
        pids = cluster_pids({child.pid for child in children})
        member_pids = [child.pid for child in children]
        wait_quiet(args.quiet_load)
        load_at = os.getloadavg()[0]
        members_before = cpu_s(member_pids)
        members_s = window(pids, args.window_s)
        member_cpu_s = cpu_s(member_pids) - members_before
        member_threads = sum(int(next(line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("Threads")))
                             for pid in member_pids)
    finally:
        for child in children:
            child.kill()
            child.wait()
    row = {"members": share * args.processes, "processes": args.processes, "per_group": args.per_group,
           "ttl_s": args.ttl_s, "window_s": args.window_s, "cluster_cpu_s_idle": baseline_s,
           "cluster_cpu_s_with_members": members_s,
           "cluster_cores_for_members": round((members_s["all"] - baseline_s["all"]) / args.window_s, 4),
           "join_s_per_process": [j["joined_s"] for j in joined], "member_threads": member_threads,
           "member_cpu_s_in_window": round(member_cpu_s, 2), "load_1m_before": load_before, "load_1m_at_window": load_at}
    with open(args.out, "a") as out:
        out.write(json.dumps(row) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
