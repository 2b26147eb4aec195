"""One line per run of run_ab.sh: python summary.py (in this directory)."""
import glob, json
for path in sorted(glob.glob("feed_lag-r*-*.json")):
    side = path[len("feed_lag-"):-len(".json")]
    for run in json.load(open(path))["runs"]:
        fed = sum(p["records_fed"] for node in run["feeds_at_end"].values() for p in node.values())
        print(json.dumps({"run": side, "vps": run["virtual_partitions"], "msgs_per_s": run["producer"]["msgs_per_s"],
                          "lag_records_max": run["lag"]["records"]["max"], "lag_records_p50": run["lag"]["records"]["p50"],
                          "lag_ms_max": round(run["lag"]["ms"]["max"]), "drain_s": run["drain_s"],
                          "records_fed_at_end": fed, "read_node_cpu_s": run["read_node_cpu"]["cpu_s_total"],
                          "fed_mb": run["read_node_cpu"]["fed_mb"], "cpu_ms_per_fed_mb": run["read_node_cpu"]["cpu_ms_per_fed_mb"],
                          "load_1m_start_end": run["load_average_1m"]}))
