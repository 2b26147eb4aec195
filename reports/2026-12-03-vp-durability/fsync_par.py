"""fsync of N files after a small append each: one after another vs from a pool of threads."""
import os, sys, time, tempfile, statistics
from concurrent.futures import ThreadPoolExecutor
n, rounds = int(sys.argv[1]), int(sys.argv[2])
d = tempfile.mkdtemp(dir="/work/scratch/s49")
fds = [os.open(f"{d}/f{i}", os.O_WRONLY | os.O_CREAT | os.O_APPEND) for i in range(n)]
pool = ThreadPoolExecutor(8)
def append_all():
    for fd in fds: os.write(fd, b"x" * 1200)
seq, par = [], []
for r in range(rounds):
    append_all(); t = time.perf_counter()
    for fd in fds: os.fsync(fd)
    seq.append((time.perf_counter() - t) * 1000)
    append_all(); t = time.perf_counter()
    list(pool.map(os.fsync, fds))
    par.append((time.perf_counter() - t) * 1000)
print(f"n={n}: sequential median {statistics.median(seq):.2f} ms, pool(8) median {statistics.median(par):.2f} ms")
