# The split and VP batch encoding alone (plan_round + vp_batches), min of 5 passes over 4 rounds of 4,096
# keyless records, CPU ms per MB: PYTHONPATH=<tree> python3 split_encode_micro.py <VPs>. Used for de62f30 (README).
import sys, time, logging
from pathlib import Path
logging.getLogger("mafka4").setLevel(logging.ERROR)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import feed_split_micro as m
from mafka4.virtual.feed_plan import plan_round
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_records import vp_batches
w = m.Workload(False, 1024, 64, 64, 4, 0, 16, 10000, "none", 1, True)
batches = m.producer_batches(w)
layout = TopicLayout.initial(2, int(sys.argv[1]) if len(sys.argv) > 1 else 8)
rounds = [b"".join(batches[i:i+64]) for i in range(0, len(batches), 64)]
best = 1e9
for _ in range(5):
    t0 = time.process_time(); nxt = 0
    for data in rounds:
        p = plan_round(data, 0, layout, nxt, 5000); nxt = p.next_offset
        for vp, chunks in p.chunks.items():
            for c in chunks:
                for _, e in vp_batches(c): bytearray(e)
    best = min(best, time.process_time() - t0)
print("split+encode ms per MB", round(best * 1000 / (sum(map(len, rounds)) / 2**20), 3))
