"""CPU seconds per process over a window, from /proc: python3 cpu_top.py WINDOW_S -> top lines."""
import os, sys, time
HZ = os.sysconf("SC_CLK_TCK")
def snap():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")[:110]
        except OSError: continue
        fields = stat[stat.rfind(")") + 2:].split()
        out[int(pid)] = (int(fields[11]) + int(fields[12]), cmd)
    return out
window = float(sys.argv[1])
a = snap(); la = os.getloadavg(); t = time.time(); time.sleep(window); b = snap(); el = time.time() - t
rows = sorted(((b[p][0] - a[p][0]) / HZ / el, p, b[p][1]) for p in b if p in a)
total = sum(r[0] for r in rows)
print(f"window {el:.1f}s load before {la} after {os.getloadavg()} total cores {total:.3f}")
groups = {}
for cores, pid, cmd in rows:
    key = cmd.split(" ")[0].rsplit("/", 1)[-1] + (" " + cmd.split(" ")[1][:40] if " " in cmd else "")
    g = groups.setdefault(key, [0, 0.0]); g[0] += 1; g[1] += cores
for key, (n, cores) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:15]:
    print(f"{cores:8.4f} cores  {n:3d} procs  {key}")
for cores, pid, cmd in rows[-12:][::-1]:
    print(f"{cores:8.4f} {pid:7d} {cmd}")
