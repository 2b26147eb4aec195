"""Server CPU of MEMBERS members heartbeating as members do (each a long poll of WAIT_MS, sent again
as soon as answered) for SECONDS: a client port with the group handlers (fake members from
tests/unit/test_group_sessions.py, no etcd, no ACL check) in a child process, the members on one
connection each in the parent. Usage: PYTHONPATH=<tree> python heartbeat_steady.py MEMBERS WAIT_MS SECONDS"""
import asyncio, multiprocessing, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heartbeat_cost import cpu_ns, serve

async def client(host, port, members, wait_ms, seconds, pid):
    from mafka4.protocol.connection import ClientConnection
    from mafka4.protocol.group_api import GroupJoinRequest, GroupHeartbeatRequest
    conns = [await ClientConnection.open(host, port, None) for _ in range(members)]
    ids = [(await c.call(GroupJoinRequest("g", "t", "range", 10000, 60000), timeout_s=30))[0].member_id for c in conns]
    count = 0
    async def beat(c, m, stop):
        nonlocal count
        while time.monotonic() < stop:
            await c.call(GroupHeartbeatRequest("g", m, wait_ms), timeout_s=wait_ms / 1000 + 5)
            count += 1
    await asyncio.sleep(min(wait_ms / 1000, 3.333))  # joins settle, within the 10 s session timeout
    before, began = cpu_ns(pid), time.monotonic()
    await asyncio.gather(*(beat(c, m, began + seconds) for c, m in zip(conns, ids)))
    used_s, elapsed = (cpu_ns(pid) - before) / 1e9, time.monotonic() - began
    print(f"{members} members, {count} heartbeats in {elapsed:.1f} s: server {used_s / elapsed:.4f} cores, "
          f"{used_s / count * 1e6:.1f} us each, load {open('/proc/loadavg').read().split()[0]}", flush=True)

if __name__ == "__main__":
    members, wait_ms, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    parent, child = multiprocessing.Pipe()
    p = multiprocessing.Process(target=serve, args=(child,), daemon=True); p.start()
    host, port = parent.recv()
    asyncio.run(client(host, port, members, wait_ms, seconds, p.pid))
    p.kill()
