# Benchmarking a function, as with cupyx.profiler.benchmark: warm-up runs, then timed runs each
# between two markers on the current stream. "host" is the host's time for the call (enqueueing
# the work); "device (cpu)" (or cuda:0) is the time the stream spent between the markers (the
# work).
import sys

import eventide as ev

device = "cuda:0" if ev.is_available("cuda:0") else "cpu"
a = ev.randn(256, 256, device=device)
b = ev.randn(256, 256, device=device)

result = ev.benchmark(ev.matmul, a, b, n_repeat=50, n_warmup=5, device=device)
print(result)

# bfloat16 work, read back through a conversion on the device (NumPy has no bfloat16).
half = ev.randn(64, 64, device=device).astype(ev.bfloat16)
result16 = ev.benchmark(lambda: half.astype(ev.float32), n_repeat=20, device=device, name="astype")
print(result16)

stats = result.device_stats
if result.n_runs != 50 or not all(t > 0 for t in result.device_times_us):
    sys.exit(f"expected 50 timed runs with positive device times, got {result.n_runs}")
if not stats["min"] <= stats["p50"] <= stats["p99"] <= stats["max"]:
    sys.exit(f"inconsistent statistics: {stats}")
print(f"matmul p50 {stats['p50']:.1f} us, p99 {stats['p99']:.1f} us on {device}")
print("ok")
