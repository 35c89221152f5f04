"""fork() after eventide work: the child has a working CPU runtime (work queued before the fork
runs there, new work too), multiprocessing's fork start method works, and forking while ops
(matmuls) run waits for them instead of hanging (OpenBLAS's own fork handler hangs while a
matmul runs). Each scenario runs in a fresh interpreter, under a timeout."""

from __future__ import annotations

import pytest

from conftest import run_child_ok

# Waits for a forked child without hanging the parent: its exit code, or 99 if it was killed.
WAIT_CHILD = """
import os, time, signal
def wait_child(pid, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return 99
"""


def run_child(code: str, timeout: float = 60.0) -> str:
    return run_child_ok(WAIT_CHILD + code, timeout)


def test_child_of_os_fork_runs_work_queued_before_the_fork_and_new_work():
    out = run_child("""
import eventide as ev, numpy as np
x = ev.tensor([1.0, 2.0, 3.0])
x.wait()
u = ev.UserEvent()
s = ev.Stream()
s.wait(u)
with s:
    y = x + x                 # held back by u
e = ev.Event(); e.record(y)
z = (ev.ones(64, 64) @ ev.ones(64, 64)); z.wait()  # OpenBLAS loaded before the fork
pid = os.fork()
if pid == 0:
    code = 0
    try:
        u.set()
        if not e.wait(10): code = 1
        elif y.numpy().tolist() != [2.0, 4.0, 6.0]: code = 2
        w = ev.matmul(ev.ones(32, 32), ev.ones(32, 32))
        if float(w.numpy()[0, 0]) != 32.0: code = 3
        done = []
        w.add_completion_callback(lambda: done.append(1))
        t0 = time.monotonic()
        while not done and time.monotonic() - t0 < 10: time.sleep(0.01)
        if not done: code = 4
    except BaseException as exc:
        print('child:', repr(exc), flush=True)
        code = 5
    os._exit(code)
print('child', wait_child(pid), flush=True)
assert not e.query()          # the parent's copy is still held back
u.set()
assert e.wait(10)
assert y.numpy().tolist() == [2.0, 4.0, 6.0]
print('parent ok', flush=True)
""")
    assert "child 0" in out
    assert "parent ok" in out


def test_multiprocessing_fork_pool_workers_use_eventide():
    out = run_child("""
import multiprocessing as mp
import eventide as ev

def work(i):
    t = ev.matmul(ev.full((48, 48), float(i)), ev.ones(48, 48))
    return float(t.numpy()[0, 0])

if __name__ == '__main__':
    # The parent has used eventide (threads started, OpenBLAS loaded) before forking.
    assert work(1) == 48.0
    with mp.get_context('fork').Pool(2) as pool:
        got = pool.map_async(work, range(6)).get(timeout=30)
    assert got == [48.0 * i for i in range(6)], got
    print('ok', flush=True)
""")
    assert "ok" in out


def test_fork_while_matmuls_run_neither_hangs_nor_loses_them():
    out = run_child("""
import eventide as ev
a = ev.rand(700, 700); b = ev.rand(700, 700)
ref = (a @ b).numpy()
for round in range(4):
    streams = [ev.Stream() for _ in range(3)]
    outs = []
    for s in streams:
        with s:
            outs.append(a @ b)   # running (or about to) on the CPU threads while we fork
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for o in outs:
                o.wait()
                if abs(o.numpy() - ref).max() > 1e-3: code = 1
            if abs((a @ b).numpy() - ref).max() > 1e-3: code = 2
        except BaseException as exc:
            print('child:', repr(exc), flush=True)
            code = 3
        os._exit(code)
    took = time.monotonic() - t0
    assert took < 5, took
    assert wait_child(pid) == 0
    for o in outs:
        assert abs(o.numpy() - ref).max() < 1e-3
print('ok', flush=True)
""", timeout=120)
    assert "ok" in out


def test_gpu_is_a_clear_error_in_a_forked_child_when_the_parent_used_it():
    if not any(d.type == "cuda" for d in __import__("eventide").devices()):
        pytest.skip("no CUDA device: the GPU side of fork is checked on the GPU machine")
    out = run_child("""
import eventide as ev
x = ev.ones(4, device='cuda'); x.wait()
pid = os.fork()
if pid == 0:
    try:
        ev.ones(4, device='cuda').wait()
        os._exit(1)
    except ev.EventStateError as exc:
        os._exit(0 if 'fork' in str(exc) else 2)
    except BaseException as exc:
        print('child:', repr(exc), flush=True)
        os._exit(3)
assert wait_child(pid) == 0
assert (ev.ones(4, device='cuda') + x).numpy().tolist() == [2.0] * 4
print('ok', flush=True)
""")
    assert "ok" in out
