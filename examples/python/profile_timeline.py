# Seeing the work: profile two streams of matmuls joined by events, save a Chrome trace
# (Perfetto, chrome://tracing) and a timeline page, and read the ops' device times back.
#   python3 profile_timeline.py [OUT_DIR]      (default: a temporary folder)
import json
import os
import sys
import tempfile

import eventide as ev

out_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="eventide-profile-")
a, b = ev.rand(512, 512), ev.rand(512, 512)
a.wait()
b.wait()

with ev.profile() as prof:
    s1, s2 = ev.Stream(), ev.Stream()
    with ev.stream(s1):
        x = a @ b
    with ev.stream(s2):
        y = b @ a
    ev.wait_all([x, y])

trace = os.path.join(out_dir, "trace.json")
page = os.path.join(out_dir, "timeline.html")
prof.export_chrome_trace(trace)   # open in https://ui.perfetto.dev or chrome://tracing
prof.export_timeline(page, title="Two matmuls on two streams",  # open in a browser
                     note="They run at the same time; the host waits for both.")
print(prof)
for op in prof.ops:
    print(f"  {op['name']:<8} on {op['stream']:<14} {op['detail']:<40} {op['duration_us']:9.1f} us")
print("wrote", trace, "and", page)

matmuls = [op for op in prof.ops if op["name"] == "matmul"]
if len(matmuls) != 2 or len({op["stream"] for op in matmuls}) != 2:
    sys.exit("expected one matmul on each stream")
if not all(op["finished"] and op["start_us"] <= op["end_us"] for op in matmuls):
    sys.exit("every matmul finished, with its times")
with open(trace) as f:
    if not json.load(f)["traceEvents"]:
        sys.exit("the trace has no events")
print("ok")
