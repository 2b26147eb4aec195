# Probe: log every cyclic-collector pass of 5 ms or more in this process, with wall time and generation.
import gc, os, time
_out = os.environ.get("GC_PROBE_DIR")
if _out:
    _start = [0.0]
    _path = os.path.join(_out, f"{os.getpid()}.log")
    def _cb(phase, info):
        if phase == "start":
            _start[0] = time.perf_counter()
        else:
            d = (time.perf_counter() - _start[0]) * 1000
            if d >= 5.0:
                try:
                    with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ")[:120].decode(errors="replace")
                except OSError:
                    cmd = "?"
                with open(_path, "a") as f:
                    f.write(f"{time.time():.3f} gen{info['generation']} {d:.1f}ms collected={info['collected']} {cmd}\n")
    gc.callbacks.append(_cb)
