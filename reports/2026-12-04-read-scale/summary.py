"""The figures this report quotes, from ``bench_read_scale.json`` and the stamps in ``recorded_trimmed.json.gz``.

    PYTHONPATH=$PWD python3 reports/2026-12-04-read-scale/summary.py [DIRECTORY]

DIRECTORY: this report's directory (default) or its ``before_fixes``.

``recorded_trimmed.json.gz`` is the bench's ``bench_read_scale_recorded.json.gz`` cut to the
stamps from 15 s before each run's trigger to 30 s after it (every window quoted lies inside).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from benchmarks.read_scale_figures import Trigger, ack_latencies_ms, member_gaps_ms

HERE = Path(__file__).parent
BEFORE_MS, AFTER_MS = -15_000, 30_000


def trim(full_path: str, out_path: str) -> None:
    """Cut the bench's full stamps to [BEFORE_MS, AFTER_MS] around each trigger."""
    runs = json.load(gzip.open(full_path, "rt"))
    for run in runs:
        start = run["trigger"]["monotonic_ns"] + BEFORE_MS * 1_000_000
        end = run["trigger"]["monotonic_ns"] + AFTER_MS * 1_000_000
        kept = [(s, a) for s, a in zip(run["sent_ns"], run["acked_ns"]) if start <= s <= end]
        run["sent_ns"], run["acked_ns"] = [s for s, _ in kept], [a for _, a in kept]
        run["receive_ns"] = {name: [t for t in times if start <= t <= end] for name, times in run["receive_ns"].items()}
    with gzip.open(out_path, "wt") as out:
        json.dump(runs, out)


def main(directory: Path) -> None:
    report = json.loads((directory / "bench_read_scale.json").read_text())
    recorded = json.load(gzip.open(directory / "recorded_trimmed.json.gz", "rt"))
    by_key = {(run["mode"], run["pair"]): run for run in report["runs"]}
    print(f"commit {report['commit']}")
    for pair, summary in enumerate(report["summary"]["pairs"]):
        print(f"pair {pair}: steps (ms after the trigger) {summary['steps_ms']}")
        print(f"pair {pair}: fixed run's steps {summary['fixed_steps_ms']}")
        print(f"pair {pair}: between {summary['steps_between_ms']}")
    windows = {pair: summary["move_window_ms"] for pair, summary in enumerate(report["summary"]["pairs"])}
    print("mode | pair | load before / at end | steady gaps max, ms [-10 s, 0] | move-window gaps min-max, ms "
          "| after gaps max, ms [end+2 s, end+12 s] | produce p50 / p99 / p99.9 in window | in [-10 s, 0]")
    for run in recorded:
        trigger = Trigger(**run["trigger"])
        start, end = windows[run["pair"]]
        steady = member_gaps_ms(run["receive_ns"], trigger, (-10_000, 0))
        moving = member_gaps_ms(run["receive_ns"], trigger, (start, end))
        after = member_gaps_ms(run["receive_ns"], trigger, (end + 2_000, end + 12_000))
        window = ack_latencies_ms(run["sent_ns"], run["acked_ns"], trigger, (start, end))
        before = ack_latencies_ms(run["sent_ns"], run["acked_ns"], trigger, (-10_000, 0))
        meta = by_key[(run["mode"], run["pair"])]
        print(f"{run['mode']} | {run['pair']} | {meta['load_before']} / {meta['load_at_end']} | {max(steady.values())} | "
              f"{min(moving.values())}-{max(moving.values())} | {max(after.values())} | "
              f"{window['p50']} / {window['p99']} / {window['p99.9']} ({window['messages']} msgs) | "
              f"{before['p50']} / {before['p99']} / {before['p99.9']}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
