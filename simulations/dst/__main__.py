"""``python3 -m simulations.dst``: replay one seed, or run many and summarise.

    python3 -m simulations.dst --seed 1234 [--trace]    one run, its result (and its trace)
    python3 -m simulations.dst --seeds 500 [--start 0]  seeds start..start+N-1, a summary

``--planted-bug NAME`` runs the seeds with one of ``mafka4.planted_bugs`` planted in the cores
(as ``$MAFKA4_PLANTED_BUG=NAME`` does): the summary then shows what the checkers caught.

Exit status 0 when every run passed, 1 otherwise. Each failure prints its seed and the exact
replay command.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter

from mafka4 import planted_bugs
from mafka4.planted_bugs import PlantedBug
from simulations.dst.run import run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m simulations.dst", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--seed", type=int, help="run this one seed")
    group.add_argument("--seeds", type=int, help="run this many seeds, from --start")
    parser.add_argument("--start", type=int, default=0, help="first seed of --seeds (default 0)")
    parser.add_argument("--trace", action="store_true", help="print the run's trace of faults and elections")
    parser.add_argument("--planted-bug", choices=[bug.value for bug in PlantedBug],
                        help="plant this bug in the cores (mafka4.planted_bugs; default: "
                             "$MAFKA4_PLANTED_BUG, else none); the seeds are expected to fail")
    args = parser.parse_args(argv)
    bug = PlantedBug(args.planted_bug) if args.planted_bug else planted_bugs.PLANTED
    with planted_bugs.planted(bug):
        return _run(parser, args)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    # The production shells the simulator runs (``HostedVp``) log leaderships and truncations as
    # warnings; the run's trace already says what happened, in simulated time.
    logging.getLogger("mafka4").setLevel(logging.ERROR)
    if args.seed is not None:
        result = run_seed(args.seed)
        if args.trace or not result.ok:
            print("\n".join(result.trace))
        print(result.summary())
        print(f"faults: {result.stats.get('faults')}")
        print(f"history digest: {result.digest}")
        return 0 if result.ok else 1
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    started = time.monotonic()
    failed = []
    # Seeds per way of failing: an anomaly kind, "error" (a broken assertion, a crash) or "not drained".
    seeds_by_failure: Counter[str] = Counter()
    for seed in range(args.start, args.start + args.seeds):
        result = run_seed(seed)
        if not result.ok:
            failed.append(seed)
            seeds_by_failure.update({anomaly.kind.value for anomaly in result.anomalies})
            seeds_by_failure.update(["error"] * (result.error is not None) + ["not drained"] * (not result.drained))
            print(result.summary(), flush=True)
    elapsed_s = time.monotonic() - started
    planted = "" if planted_bugs.PLANTED is None else f" with planted bug {planted_bugs.PLANTED.value}"
    print(f"{args.seeds} seeds from {args.start}{planted}: {args.seeds - len(failed)} passed, {len(failed)} failed "
          f"in {elapsed_s:.1f} s" + (f"; failing seeds: {failed}" if failed else ""))
    if seeds_by_failure:
        by_kind = ", ".join(f"{kind} {count}" for kind, count in sorted(seeds_by_failure.items()))
        print(f"failing seeds by kind: {by_kind}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
