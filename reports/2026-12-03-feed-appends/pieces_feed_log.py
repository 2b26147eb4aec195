"""Per VP feed call at 256 VPs, rounds of 512 records: HostedVp.feed, the feed report and Log.append alone
(CPU, no profiler). Run from a checkout with PYTHONPATH set to it."""
import os, tempfile, time, shutil
from pathlib import Path
from benchmarks import feed_split_micro as m
from mafka4.virtual.feed_plan import plan_round
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_records import vp_batches
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.limits.servers import LogConfig
from mafka4.risr.state import RisrConfig
from mafka4.log.log import Log
from mafka4.batch_frame import stamp
from benchmarks.micro_run import quiet_mafka4_logs
w = m.Workload(False, 1024, 64, 8, 40, 0, 16, 10000, "none", 1, True)
batches = m.producer_batches(w)
layout = TopicLayout.initial(2, 256)
rounds = [b"".join(batches[s:s + 8]) for s in range(0, len(batches), 8)]
plans, off = [], 0
for data in rounds:
    p = plan_round(data, 0, layout, off, 5000); plans.append(p); off = p.next_offset
d = Path(tempfile.mkdtemp())
with quiet_mafka4_logs():
    vps = {}
    for vp in range(256):
        h = HostedVp(VpId("t", vp), "r0", d / f"v{vp}", LogConfig(), RisrConfig(), 0, lambda *_: None, on_change=lambda _: None, owe_flush=lambda _: None)
        h.become_leader(0, ["r0"], ["r0"], 0); vps[vp] = h
    calls = 0; t = time.process_time()
    for p in plans:
        for vp, cs in p.chunks.items():
            for c in cs:
                vps[vp].feed(0, c, 1); calls += 1
    feed_s = time.process_time() - t
    t = time.process_time()
    for p in plans:
        for vp, cs in p.chunks.items():
            vps[vp].core.fed(0, 0, p.next_offset, p.next_offset, 1)
    fed_s = time.process_time() - t
    # Log.append alone on prebuilt stamped batches
    logs = [Log.open(d / f"l{i}", LogConfig(), now_ms=0, flushes_in_background=True) for i in range(256)]
    encoded = [e for p in plans for cs in p.chunks.values() for c in cs for _, e in vp_batches(c)]
    from mafka4.batch_frame import read_header
    stamped, ends = [], [0] * 256
    for i, e in enumerate(encoded):  # each log's batches stamped with its own offsets
        b = bytearray(e)
        stamp(b, ends[i % 256], 0)
        ends[i % 256] += read_header(b).count
        stamped.append(b)
    t = time.process_time()
    for i, b in enumerate(stamped):
        logs[i % 256].append(b, 1, check_crc=False)
    log_s = time.process_time() - t
print(f"per feed call: HostedVp.feed {feed_s/calls*1e6:.1f} us, core.fed {fed_s/calls*1e6:.1f} us, Log.append alone {log_s/len(stamped)*1e6:.1f} us")
shutil.rmtree(d)
