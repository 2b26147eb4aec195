"""A/B of an idle group member's CPU by ``fetch_wait_ms_max``, alternating sides in one session.

Each side is a fresh process running ``Consumer(topic, group=<group>-<wait>, fetch_wait_ms_max=<wait>)``
polling a topic nothing is produced to, against the running local cluster ($MAFKA4_HOME). After
SETTLE_S: its RSS and threads, then the CPU of all its threads over WINDOW_S (/proc/<pid>/task/*/schedstat).
Each side starts once the 1-minute load average is below 1.5; the load at the window's start is recorded.

Usage: python3 measure.py ROUNDS TOPIC GROUP OUT.jsonl WAIT_MS [WAIT_MS ...]
"""

import json
import os
import subprocess
import sys
import time

SETTLE_S, WINDOW_S = 15, 60
MEMBER = """
import sys
from mafka4.client.consumer import Consumer
consumer = Consumer(sys.argv[1], group=sys.argv[2], fetch_wait_ms_max=int(sys.argv[3]))
while True:
    consumer.poll(1000)
"""


def cpu_ns(pid: int) -> int:
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as stats:
            total += int(stats.read().split()[0])
    return total


def status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field + ":"))


def load_1m() -> float:
    with open("/proc/loadavg") as loadavg:
        return float(loadavg.read().split()[0])


def quiet() -> None:
    deadline = time.monotonic() + 180
    while load_1m() >= 1.5 and time.monotonic() < deadline:
        time.sleep(5)


def main() -> None:
    rounds, topic, group, out, waits = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for round_number in range(1, rounds + 1):
        for wait in waits:
            quiet()
            member = subprocess.Popen([sys.executable, "-c", MEMBER, topic, f"{group}-{wait}", wait], env=env,
                                      cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(SETTLE_S)
                load, rss_kb, threads = load_1m(), status(member.pid, "VmRSS"), status(member.pid, "Threads")
                before = cpu_ns(member.pid)
                time.sleep(WINDOW_S)
                used_ms = (cpu_ns(member.pid) - before) // 1_000_000
            finally:
                member.kill()
                member.wait()
            row = {"round": round_number, "fetch_wait_ms_max": int(wait), "rss_kb": rss_kb, "threads": threads,
                   "cpu_ms_in_window": used_ms, "window_s": WINDOW_S, "load_1m": load}
            print(json.dumps(row), flush=True)
            with open(out, "a") as rows:
                rows.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
