"""Capture once, replay many times: ``with ev.capture() as g:`` records a small step, then each
input is copied into the graph's input tensor, the graph replayed and its output read, with
noise the graph draws afresh at each replay (as eager ``rand`` would then); each
replay is an Event (waited for, timed). On the default device: the CPU, or a GPU, where the
capture records into a CUDA graph and each replay is one graph launch.

    python3 examples/python/graph_replay.py
"""

import numpy as np

import eventide as ev

static_input = ev.zeros(1024)  # read by the graph at each replay
total = ev.zeros(1024)
with ev.capture(stream=ev.Stream()) as step:  # nothing runs in the block
    static_output = ev.mul(ev.add(static_input, 1.0), 2.0)
    ev.add(total, static_output, out=total)
    noise = ev.rand(1024)  # new numbers at every replay
print(step)

last_noise = None
for i in range(5):
    static_input.copy_(ev.full((1024,), float(i)))  # new data, same memory
    done = step.replay()
    done.wait()
    print(f"replay {i}: output {static_output.numpy()[0]:.0f}, total {total.numpy()[0]:.0f}, "
          f"noise {noise.numpy()[0]:.3f}, {done.time_elapsed():.1f} us on the device")
    assert last_noise is None or not np.array_equal(noise.numpy(), last_noise)
    last_noise = noise.numpy().copy()

assert np.all(total.numpy() == 30.0)  # 2 * (1 + 2 + 3 + 4 + 5)
print("ok")
