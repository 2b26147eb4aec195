#!/bin/bash
# The fleet model recalibrated on 2026-12-04: calibrate on a quiet machine, then the model and its
# sensitivity with that calibration. ray-call-read/ holds the same three steps run at fcc0a13,
# whose read trial fetched by Ray call. The model and the sensitivity are deterministic for a
# calibration and a seed: rerunning them reproduces fleet_summary.json and sensitivity.json
# (their Parquet event logs are not kept for that reason).
set -u
out=$(realpath -m "$(dirname "$0")")
cd /tmp
mafka4 fleet calibrate --out "$out/calibration.json"                              # 328.9 s
mafka4 fleet model --calibration "$out/calibration.json" --out /tmp/fleet-model    # model.log
cp /tmp/fleet-model/fleet_summary.json "$out/"
mafka4 fleet sensitivity --calibration "$out/calibration.json" --out "$out"        # 99 s (sensitivity.log)
