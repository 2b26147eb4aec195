"""Context switches per second by process kind and by thread name over a window: python3 wakes.py WINDOW_S."""
import os, sys, time, collections
def snap():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try: cmd = open(f"/proc/{pid}/cmdline").read().split("\0")[0].rsplit("/",1)[-1][:30]
        except OSError: continue
        try: tids = os.listdir(f"/proc/{pid}/task")
        except OSError: continue
        for tid in tids:
            try:
                st = open(f"/proc/{pid}/task/{tid}/status").read()
                comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            except OSError: continue
            v = n = 0
            for line in st.splitlines():
                if line.startswith("voluntary_ctxt_switches"): v = int(line.split()[1])
                if line.startswith("nonvoluntary_ctxt_switches"): n = int(line.split()[1])
            out[(int(pid), int(tid))] = (v + n, cmd, comm)
    return out
w = float(sys.argv[1]); a = snap(); time.sleep(w); b = snap()
byproc = collections.Counter(); bythread = collections.Counter(); nthreads = collections.Counter()
for key, (c, cmd, comm) in b.items():
    if key in a:
        d = (c - a[key][0]) / w
        byproc[cmd] += d; bythread[(cmd, comm)] += d; nthreads[(cmd, comm)] += 1
print("total wakes/s", round(sum(byproc.values())), "threads", len(b))
for k, v in byproc.most_common(8): print(f"{v:9.1f}/s  {k}")
print("-- by thread name")
for k, v in bythread.most_common(20): print(f"{v:9.1f}/s  {nthreads[k]:4d} threads  {k}")
