# Naming your own regions: ev.range as a `with` block and as a decorator. The ranges are in
# eventide's profile (and its trace and timeline page) and, on CUDA builds with NVTX, in
# Nsight Systems beside eventide's own ranges (each op's launch, waits, callbacks):
#   nsys profile -t nvtx,cuda -o /tmp/ranges python3 examples/python/ranges.py
#   nsys stats --report nvtx_sum /tmp/ranges.nsys-rep
# Runs on the default device (a GPU if there is one, else the CPU).
import eventide as ev


@ev.range("make inputs")  # each call is a range
def make_inputs(n):
    a, b = ev.randn(n, n), ev.randn(n, n)
    ev.wait_all([a, b])
    return a, b


with ev.profile() as prof:
    with ev.range("step"):
        a, b = make_inputs(256)
        with ev.range("matmuls"):
            x = a @ b
            y = x @ a
        done = ev.Event()
        done.record(y)
        done.add_callback(lambda: None)
        with ev.range("wait"):
            done.wait()
    ev.synchronize()

print(prof)
for r in prof.ranges:
    print(f"  {r['name']:<12} on {r['thread']:<9} {r['end_us'] - r['start_us']:9.1f} us")
assert [r["name"] for r in prof.ranges] == ["step", "make inputs", "matmuls", "wait"]
