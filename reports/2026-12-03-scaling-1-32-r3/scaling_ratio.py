"""Mafka4's produce (or end-to-end) tp999 at one consumer count over another, with a 95 % interval.

The same method as ``simulations/analysis/intervals.py`` (a Poisson block bootstrap: each run's
messages cut into blocks of 1,000 ms of produce time, every (run, block) weighted by a Poisson(1)
draw per replicate; per run the weighted nearest-rank percentile, per configuration the median
over its repetitions, the interval the 2.5th and 97.5th nearest-rank percentiles of the replicate
ratios), for a ratio that the analysis does not give: one mode's figure at two consumer counts.
The draws come from numpy's generator with a fixed seed, not from the analysis's hash.

Usage: python scaling_ratio.py EVENT_DIR [--mode mafka4] [--high 32] [--low 1]
       [--latency produce_latency_ms] [--replicates 1000]
"""
import argparse
import glob
import json
import math

import numpy as np
import pyarrow.parquet as pq

BLOCK_MS = 1000.0
Q = 0.999


def runs(event_dir, mode, consumers, latency):
    found = []
    for path in sorted(glob.glob(f"{event_dir}/{mode}-c{consumers:03d}-r*.parquet")):
        table = pq.read_table(path, columns=["produce_time_ms", latency])
        times = table.column("produce_time_ms").to_numpy(zero_copy_only=False).astype(float)
        values = table.column(latency).to_numpy(zero_copy_only=False).astype(float)
        kept = ~np.isnan(values)  # a message never acknowledged (or never delivered) has no latency
        times, values = times[kept], values[kept]
        blocks = np.floor((times - times.min()) / BLOCK_MS).astype(int)
        order = np.argsort(values)
        found.append((path.rsplit("/", 1)[-1], values[order], blocks[order]))
    return found


def weighted_percentile(values, weights, q=Q):
    total = weights.sum()
    if total == 0:
        return math.nan
    rank = math.ceil(q * total)
    return values[np.searchsorted(np.cumsum(weights), rank)]


def statistic(config_runs, rng):
    per_run = []
    for _, values, blocks in config_runs:
        if rng is None:
            weights = np.ones(len(values), dtype=np.int64)
        else:
            weights = rng.poisson(1.0, blocks.max() + 1)[blocks]
        per_run.append(weighted_percentile(values, weights))
    return float(np.median(per_run)), per_run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("event_dir")
    parser.add_argument("--mode", default="mafka4")
    parser.add_argument("--high", type=int, default=32)
    parser.add_argument("--low", type=int, default=1)
    parser.add_argument("--latency", default="produce_latency_ms")
    parser.add_argument("--replicates", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args()
    high = runs(args.event_dir, args.mode, args.high, args.latency)
    low = runs(args.event_dir, args.mode, args.low, args.latency)
    high_point, high_runs = statistic(high, None)
    low_point, low_runs = statistic(low, None)
    rng = np.random.default_rng(args.seed)
    ratios = []
    for _ in range(args.replicates):
        h, _ = statistic(high, rng)
        l, _ = statistic(low, rng)
        if l > 0:
            ratios.append(h / l)
    bounds = np.percentile(ratios, [2.5, 97.5], method="inverted_cdf")
    print(json.dumps({
        "mode": args.mode, "latency": args.latency, "percentile": "tp999",
        f"at_{args.high}_runs_ms": {name: round(v, 3) for (name, _, _), v in zip(high, high_runs)},
        f"at_{args.low}_runs_ms": {name: round(v, 3) for (name, _, _), v in zip(low, low_runs)},
        f"at_{args.high}_median_ms": round(high_point, 3), f"at_{args.low}_median_ms": round(low_point, 3),
        "ratio": round(high_point / low_point, 3), "ratio_low": round(float(bounds[0]), 3),
        "ratio_high": round(float(bounds[1]), 3), "replicates": len(ratios), "block_ms": BLOCK_MS,
        "seed": args.seed}))


if __name__ == "__main__":
    main()
