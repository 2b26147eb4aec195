"""Bytes a node's metadata view (``frontend.view_state.ViewState``) holds per VP: one topic of
N VPs (their states and the split epoch naming them) loaded as a watch delivers them, measured
with tracemalloc. Run from the repository root: ``python3 reports/2026-12-03-vp-density-rr1/view_bytes.py``."""

import gc
import json
import tracemalloc

from mafka4.frontend.view_state import ViewState, Watched
from mafka4.metadata import keys

VPS = 4096
SPAN = 2 ** 64 // VPS


def main() -> None:
    states = [json.dumps({"leader": "r0", "leader_epoch": 0, "range": [i * SPAN, (i + 1) * SPAN], "replicas": ["r0"],
                          "risr": ["r0"]}) for i in range(VPS)]
    epoch = json.dumps({"children": list(range(VPS)), "cut": [0], "epoch": 0, "parents": [],
                        "ranges": [[i * SPAN, (i + 1) * SPAN, i] for i in range(VPS)]})
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    view = ViewState("local")
    items = [(keys.topic("local", "t"), {"partitions": 1, "read_mode": "mafka4"}),
             (keys.split_epoch("local", "t", 0), json.loads(epoch))]
    items += [(keys.virtual_partition("local", "t", vp), json.loads(text)) for vp, text in enumerate(states)]
    view.load(Watched.TOPICS, items)
    del items
    gc.collect()
    print(f"bytes per VP in a node's view: {round((tracemalloc.get_traced_memory()[0] - before) / VPS)}")


if __name__ == "__main__":
    main()
