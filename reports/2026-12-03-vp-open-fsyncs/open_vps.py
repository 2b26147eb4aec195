"""Time to open N new hosted VPs and make each the leader of epoch 0, as ``ReadNode.host`` does for
a new topic or a split's children, in one process on a temp directory; prints one JSON line.
Counts the fsyncs too. Run with the tree to measure first on ``PYTHONPATH``:

    PYTHONPATH=TREE python3 open_vps.py N LABEL
"""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mafka4.limits import TopicConfig
from mafka4.limits.servers import topic_log_config
from mafka4.log.log_dir_budget import LogDirBudget
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId


def main() -> None:
    count, label = int(sys.argv[1]), sys.argv[2]
    fsyncs = 0
    real_fsync = os.fsync

    def counted(fd):
        nonlocal fsyncs
        fsyncs += 1
        return real_fsync(fd)

    os.fsync = counted
    root = Path(tempfile.mkdtemp(prefix="open-vps-", dir=os.environ.get("OPEN_VPS_DIR")))
    log_config, risr_config, budget = topic_log_config(TopicConfig()), RisrConfig(), LogDirBudget(root)
    started = time.perf_counter()
    for vp in range(count):
        hosted = HostedVp(VpId("t", vp), "r0", root / f"t-v{vp}", log_config, risr_config, 0, lambda *_: None, budget,
                          on_change=lambda _: None, owe_flush=lambda _: None)
        hosted.become_leader(0, ["r0"], ["r0"], 0)
    elapsed_s = time.perf_counter() - started
    shutil.rmtree(root)
    print(json.dumps({"label": label, "vps": count, "ms_per_vp": round(elapsed_s / count * 1000, 3),
                      "fsyncs_per_vp": fsyncs / count, "load_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
