"""Python and C calls per VP feed call (cProfile's count), 256 VPs, rounds of 512 records, keyless.
Run from a checkout with PYTHONPATH set to it; an argument N also prints the N functions of most own time."""
import cProfile, pstats, sys
from benchmarks import feed_split_micro as m
from benchmarks.micro_run import quiet_mafka4_logs
w = m.Workload(False, 1024, 64, 8, 12, 2, 16, 10000, "none", 1, True)
batches = m.producer_batches(w)
p = cProfile.Profile()
with quiet_mafka4_logs():
    r = m.feed_rounds(w, 256, batches, p)
st = pstats.Stats(p)
calls = sum(v[1] for v in st.stats.values())
print("feed calls", r.feed_calls, "python+C calls per feed call %.1f" % (calls / r.feed_calls), "cpu ms/MB under profile %.1f" % r.cpu_ms_per_mb)
if len(sys.argv) > 1:
    st.sort_stats("tottime").print_stats(int(sys.argv[1]))
