"""Per VP batch at 256 VPs, rounds of 512 records: the split, the VP batch encoding and its os.write
(CPU, no profiler). Run from a checkout with PYTHONPATH set to it."""
import os, tempfile, time, shutil
from pathlib import Path
from benchmarks import feed_split_micro as m
from benchmarks.micro_run import quiet_mafka4_logs
from mafka4.virtual.feed_plan import plan_round
from mafka4.virtual.layout import TopicLayout
from mafka4.limits.servers import FeederConfig
from mafka4.virtual.vp_records import vp_batches
w = m.Workload(False, 1024, 64, 8, 40, 0, 16, 10000, "none", 1, True)
batches = m.producer_batches(w)
layout = TopicLayout.initial(2, 256)
rounds = [b"".join(batches[s:s + 8]) for s in range(0, len(batches), 8)]
t = time.process_time(); plans = []; off = 0
for data in rounds:
    p = plan_round(data, 0, layout, off, 5000); plans.append(p); off = p.next_offset
split_s = time.process_time() - t
chunks = [c for p in plans for cs in p.chunks.values() for c in cs]
t = time.process_time()
encoded = [e for c in chunks for _, e in vp_batches(c)]
enc_s = time.process_time() - t
d = Path(tempfile.mkdtemp()); fds = [os.open(d / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_APPEND) for i in range(256)]
t = time.process_time()
for i, e in enumerate(encoded):
    os.write(fds[i % 256], e)
write_s = time.process_time() - t
shutil.rmtree(d)
n = len(encoded)
print(f"{n} VP batches of {sum(map(len, chunks))/n:.1f} records: split {split_s/n*1e6:.1f} us per VP batch, encode {enc_s/n*1e6:.1f} us, os.write {write_s/n*1e6:.1f} us")
