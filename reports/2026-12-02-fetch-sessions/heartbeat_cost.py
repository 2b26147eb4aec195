"""Server CPU per GROUP_HEARTBEAT: a client port with the group handlers (fake members from
tests/unit/test_group_sessions.py, no etcd, no ACL check) in a child process; the parent sends
ROUNDS heartbeats (each waiting WAIT_MS, default 0) from each of MEMBERS members over their own
connections, and reads the child's CPU (all threads' schedstat) before and after.
Usage: PYTHONPATH=<tree> python heartbeat_cost.py MEMBERS ROUNDS [WAIT_MS]"""
import asyncio, multiprocessing, os, sys, time

def cpu_ns(pid):
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total

def serve(conn):
    sys.path.insert(0, "/work/main/tests/unit")
    from test_group_sessions import sessions_with
    from mafka4.frontend.group_handlers import GroupHandlers
    from mafka4.protocol.server import ClientPortServer
    async def main():
        members = []
        sessions = sessions_with(members)
        sessions._clock = time.monotonic
        async def view(): raise AssertionError
        handlers = GroupHandlers(sessions, view, lambda *a: None).handlers()
        server = ClientPortServer(handlers, "bench", "n0", None)
        host, port = await server.start("127.0.0.1", 0)
        conn.send((host, port))
        await asyncio.Event().wait()
    asyncio.run(main())

async def client(host, port, members, rounds, pid):
    from mafka4.protocol.connection import ClientConnection
    from mafka4.protocol.group_api import GroupJoinRequest, GroupHeartbeatRequest
    conns = [await ClientConnection.open(host, port, None) for _ in range(members)]
    ids = []
    for c in conns:
        answer, _ = await c.call(GroupJoinRequest("g", "t", "range", 10000, 60000), timeout_s=10)
        ids.append(answer.member_id)
    before = cpu_ns(pid); t0 = time.monotonic()
    for _ in range(rounds):
        await asyncio.gather(*(c.call(GroupHeartbeatRequest("g", m, int(sys.argv[3]) if len(sys.argv) > 3 else 0), timeout_s=10) for c, m in zip(conns, ids)))
    used = cpu_ns(pid) - before
    n = members * rounds
    print(f"{n} heartbeats: server {used/n/1000:.1f} us CPU each, {time.monotonic()-t0:.1f} s wall, load {open('/proc/loadavg').read().split()[0]}")

if __name__ == "__main__":
    members, rounds = int(sys.argv[1]), int(sys.argv[2])
    parent, child = multiprocessing.Pipe()
    p = multiprocessing.Process(target=serve, args=(child,), daemon=True); p.start()
    host, port = parent.recv()
    asyncio.run(client(host, port, members, rounds, p.pid))
    p.kill()
