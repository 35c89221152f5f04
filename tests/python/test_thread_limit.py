"""At the thread limit (``ulimit -v`` in the child: no room for another thread's stack), work
still finishes on the threads the runtime has, nothing deadlocks, and a callback that no
thread could run is refused with DeviceError instead of being silently dropped."""

from __future__ import annotations

from conftest import run_child_ok

LIMIT = """
import resource, threading, time
import numpy  # before the limit: loading it maps memory
import eventide as ev

def vm_bytes():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmSize:'):
                return int(line.split()[1]) * 1024

def no_more_threads():
    # Room for small allocations, not for another thread's stack.
    limit = vm_bytes() + (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    try:
        threading.Thread(target=lambda: None).start()
    except RuntimeError:
        return
    raise SystemExit('the limit did not stop a thread from starting')
"""


def run_child(code: str) -> str:
    return run_child_ok(LIMIT + code, what="hung at the thread limit")


def test_dependent_work_on_many_streams_finishes_at_the_thread_limit():
    """A producer held back by a UserEvent and 200 streams consuming its output: with no thread
    to be had beyond the one running, every op finishes once the gate is set."""
    out = run_child("""
x = ev.ones(8)
cs = [ev.full((8,), float(i)) for i in range(200)]
assert ev.wait_all(cs + [x], timeout=10)  # the runtime and its first CPU threads
no_more_threads()
u = ev.UserEvent()
producer = ev.Stream()
producer.wait(u)
with producer:
    y = x + x
outs = []
for i in range(200):
    s = ev.Stream()
    with s:
        outs.append(y + cs[i])
u.set()
assert ev.wait_all(outs, timeout=30), 'not all finished'
assert [float(o.numpy()[0]) for o in outs] == [2.0 + i for i in range(200)]
print('ok', flush=True)
""")
    assert "ok" in out


def test_a_callback_no_thread_could_run_is_refused():
    out = run_child("""
x = ev.ones(8); x.wait()
no_more_threads()
u = ev.UserEvent()
try:
    u.add_callback(lambda: None)
except ev.DeviceError as exc:
    assert 'thread' in str(exc), exc
    print('refused:', exc, flush=True)
else:
    raise SystemExit('add_callback accepted a callback that no thread can run')
e = ev.Event(); e.record(x)
try:
    e.add_callback(lambda: None)     # finished already: it would run at once, on that thread
except ev.DeviceError:
    print('refused again', flush=True)
u.set()                               # the event goes on without it
assert u.wait(5)
print('ok', flush=True)
""")
    assert "refused:" in out and "refused again" in out and "ok" in out
