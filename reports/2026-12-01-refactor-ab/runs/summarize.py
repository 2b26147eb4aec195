import json, statistics, sys
from pathlib import Path
d = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/scratch/s38/ab")
order = [("old", 1), ("new", 1), ("old", 2), ("new", 2)]
print("## produce (bench produce --skip-memory)")
print("| run (in order) | Producer msgs/s | bare actor msgs/s | ratio to bare actor | bare stream msgs/s | ratio to bare stream | send_many msgs/s | paced p99.9 ms |")
print("|---|---|---|---|---|---|---|---|")
for v, r in [(v, r) for r in range(1, 6) for v in ("old", "new")]:
    p = json.loads((d / f"produce_{v}_{r}.json").read_text())
    s = p.get("summary", p)
    print(f"| {v} {r} | {s['producer_msgs_per_s']:,} | {s['bare_actor_msgs_per_s']:,} | {s['producer_vs_bare_ratio']} | {s['bare_stream_msgs_per_s']:,} | {s['producer_vs_bare_stream_ratio']} | {s['producer_send_many_msgs_per_s']:,} | {s['paced_latency_ms']['p99.9']} |")
print()
print("## consume (1M backlog, 2 repetitions; each drain's msgs/s, members' µs per message median)")
print("| run | read mode | consumers | msgs/s each | member µs/msg | machine µs/msg |")
print("|---|---|---|---|---|---|")
for v, r in order:
    c = json.loads((d / f"consume_{v}_{r}.json").read_text())
    s = c["summary"]
    for mode in ("mafka3", "mafka4"):
        cells = s[mode]
        if "none" in cells:
            cells = cells["none"]
        for n in ("1", "4"):
            x = cells[n]
            each = ", ".join(f"{m/1000:.1f}k" for m in x["msgs_per_s_each"])
            print(f"| {v} {r} | {mode} | {n} | {each} | {x['member_cpu_us_per_message_median']} | {x['machine_cpu_us_per_message_median']} |")
print()
print("## stream (bench stream: 4 MiB answers, 3 repetitions, medians)")
print("| run (in order) | caller ms CPU/MiB | server ms CPU/MiB | wall ms/MiB |")
print("|---|---|---|---|")
for v, r in [(v, r) for r in range(1, 6) for v in ("old", "new")]:
    s = json.loads((d / f"stream_{v}_{r}.json").read_text())["summary"]
    print(f"| {v} {r} | {s['caller_cpu_ms_per_mib']} | {s['server_cpu_ms_per_mib']} | {s['wall_ms_per_mib']} |")

print()
print("## chaos")
print("| seed | code | verdict | faults | sent = acknowledged | consumed (distinct, re-delivered) | lost, duplicate, reordered |")
print("|---|---|---|---|---|---|---|")
for seed in (42, 7, 1234):
    for v in ("old", "new"):
        c = json.loads((d / f"chaos_{v}_{seed}.json").read_text())
        m = c["messages"]; a = c["anomalies"]
        verdict = "pass" if c["verdict"]["passed"] else "FAIL: " + "; ".join(c["verdict"]["reasons"])
        print(f"| {seed} | {v} | {verdict} | {c['faults_injected']} | {m['sent']:,} = {m['acknowledged']:,} | "
              f"{m['consumed_records']:,} ({m['consumed_unique']:,}, {m['redelivered']:,}) | "
              f"{a['lost']}, {a['duplicate']}, {a['reordered']} |")
