"""``python3 -m simulations.dst``: replay one seed, or run many and summarise.

    python3 -m simulations.dst --seed 1234 [--trace]    one run, its result (and its trace)
    python3 -m simulations.dst --seeds 500 [--start 0]  seeds start..start+N-1, a summary

Exit status 0 when every run passed, 1 otherwise. Each failure prints its seed and the exact
replay command.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from simulations.dst.run import run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m simulations.dst", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--seed", type=int, help="run this one seed")
    group.add_argument("--seeds", type=int, help="run this many seeds, from --start")
    parser.add_argument("--start", type=int, default=0, help="first seed of --seeds (default 0)")
    parser.add_argument("--trace", action="store_true", help="print the run's trace of faults and elections")
    args = parser.parse_args(argv)
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
    for seed in range(args.start, args.start + args.seeds):
        result = run_seed(seed)
        if not result.ok:
            failed.append(seed)
            print(result.summary(), flush=True)
    elapsed_s = time.monotonic() - started
    print(f"{args.seeds} seeds from {args.start}: {args.seeds - len(failed)} passed, {len(failed)} failed "
          f"in {elapsed_s:.1f} s" + (f"; failing seeds: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
