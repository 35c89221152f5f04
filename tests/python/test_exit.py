"""Exit while each kind of work runs (issue 10): the interpreter exits cleanly (status 0, no
"Fatal Python error", no "terminate called", no abort, no segfault) and promptly, whatever
eventide is doing at that moment.

test_interrupt.py's EXIT_SCENARIOS cover callbacks (running, sleeping or computing past the
grace period, pending on a UserEvent) and daemon threads blocked in ``UserEvent.wait``,
``Event.wait`` and ``numpy()``. The kinds of work here are the others: a CPU matmul running
(within and past the grace period), asyncio awaits pending or being cancelled, the profiler
recording or stopping, a queue held back by a UserEvent, callbacks queued, threads blocked in
every other wait (daemon, and not: a timed wait), threads still calling eventide while the
interpreter finalizes, Python objects only the runtime still holds, and a forked child that
exits normally.

Three scenarios found bugs, now fixed: daemon threads inside ``Event.wait`` (the fast entry
points caught the interpreter's forced unwind) or ``Profiler.stop`` (a GIL guard taken again
during that unwind) sometimes crashed the exit (each runs 24 times), and a matmul running past
the grace period hung it inside OpenBLAS's own teardown (the exit now waits for BLAS calls in
progress).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from conftest import start_child

if sys.platform == "win32":  # pragma: no cover
    pytest.skip("POSIX processes", allow_module_level=True)

GRACE_S = 5.0  # the runtime's exit grace period (docs/GUARANTEES.md, "Process exit")
# "Promptly": the whole child (start, work, exit) within the grace period and a margin for a
# loaded machine. None of these scenarios has a runtime thread stuck past the grace.
PROMPT_S = GRACE_S + 5.0
BAD = ("Fatal Python error", "terminate called", "FATAL", "Segmentation", "Aborted",
       "core dumped")
# Threads blocked on work when the runtime shuts down end with its error, and print it (an
# uncaught exception in a thread): allowed, as long as it is eventide's.
RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b.*)$", re.M)

GATED = ("u = ev.UserEvent(); s = ev.Stream('cpu'); s.wait(u)\n"
         "with s:\n    x = ev.rand(64, 64)\n")


def exit_cleanly(code: str, within: float) -> tuple:
    """Runs ``code`` in a fresh interpreter, which must print 'bye' and then exit cleanly
    within ``within`` seconds of starting; returns how long it took, and its output."""
    t0 = time.monotonic()
    p = start_child("import eventide as ev, threading, time, sys\n" + code +
                    "print('bye', flush=True)\n")
    try:
        out, err = p.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"the interpreter did not exit within {within} s (hang at exit?)\n"
                    f"stdout: {out}\nstderr: {err}")
    elapsed = time.monotonic() - t0
    assert "bye" in out, (out, err)
    for bad in BAD:
        assert bad not in err, err
    for line in RAISED.findall(err):
        assert line.startswith("eventide."), f"a thread died of {line!r}:\n{err}"
    assert p.returncode == 0, (p.returncode, err)
    return elapsed, out


# Each scenario: (code that sets the work up and returns with it in flight, the time within
# which the child must have exited).
SCENARIOS = {
    # a matmul of about a second runs on the CPU backend's thread; another is queued after it
    "matmul_running": (
        "a = ev.rand(2000, 2000, dtype=ev.float64); a.wait()\n"
        "b = a @ a\n"
        "c = b @ a\n"
        "c.add_completion_callback(lambda: None)\n"
        "time.sleep(0.2)\n", PROMPT_S),
    # an asyncio loop on a daemon thread awaits held-back work (an event, a tensor, wait_all_async)
    "asyncio_awaits_pending_on_a_thread": (
        "import asyncio\n" + GATED +
        "e = ev.Event(); e.record(x)\n"
        "started = threading.Event()\n"
        "async def main():\n"
        "    started.set()\n"
        "    await asyncio.gather(asyncio.wait_for(e, 3600), asyncio.wait_for(x, 3600),\n"
        "                         ev.wait_all_async([e, x, u], timeout=3600))\n"
        "threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()\n"
        "started.wait(10); time.sleep(0.1)\n", PROMPT_S),
    # awaits timing out (asyncio.wait_for cancels them) again and again while the process exits
    "asyncio_awaits_being_cancelled": (
        "import asyncio\n" + GATED +
        "e = ev.Event(); e.record(x)\n"
        "started = threading.Event()\n"
        "async def main():\n"
        "    started.set()\n"
        "    while True:\n"
        "        for target in (e, x, u):\n"
        "            try:\n"
        "                await asyncio.wait_for(target, 0.0005)\n"
        "            except asyncio.TimeoutError:\n"
        "                pass\n"
        "threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()\n"
        "started.wait(10); time.sleep(0.1)\n", PROMPT_S),
    # the main thread's loop is left, not closed, with tasks awaiting held-back work
    "asyncio_loop_left_with_pending_tasks": (
        "import asyncio\n" + GATED +
        "e = ev.Event(); e.record(x)\n"
        "loop = asyncio.new_event_loop()\n"
        "tasks = [loop.create_task(asyncio.wait_for(t, 3600)) for t in (e, x, u)]\n"
        "loop.run_until_complete(asyncio.sleep(0.05))\n"
        "u.set()  # their callbacks are queued for a loop that never runs again\n"
        "time.sleep(0.05)\n", PROMPT_S),
    # a profiler records running and held-back work, and is never stopped
    "profiler_recording": (
        "p = ev.Profiler()\n" + GATED +
        "e = ev.Event(); e.record(x); e.add_callback(lambda: None)\n"
        "y = ev.rand(500, 500) @ ev.rand(500, 500)\n"
        "ev.Event().record(y)\n", PROMPT_S),
    # 200 streams held back by one UserEvent, each with ops, an event and callbacks
    "user_event_gated_queue_held": (
        "u = ev.UserEvent()\n"
        "src = ev.rand(32, 32); src.wait()\n"
        "keep = []\n"
        "for i in range(200):\n"
        "    s = ev.Stream('cpu'); s.wait(u)\n"
        "    with s:\n"
        "        y = src @ src + src\n"
        "    e = ev.Event(); e.record(y); e.add_callback(lambda: print('never', flush=True))\n"
        "    y.add_completion_callback(lambda: None)\n"
        "    keep.append((s, y, e))\n", PROMPT_S),
    # one slow callback runs, thousands wait behind it (holding closures) when the process exits
    "callbacks_queued": (
        "t = ev.rand(4); t.wait()\n"
        "started = threading.Event()\n"
        "t.add_completion_callback(lambda: (started.set(), time.sleep(0.3)))\n"
        "for i in range(3000):\n"
        "    payload = bytearray(1024)\n"
        "    t.add_completion_callback(lambda payload=payload: len(payload))\n"
        "started.wait(10)\n", PROMPT_S),
    # a non-daemon thread in a timed wait on held-back work: the exit waits for it (1 s)
    "non_daemon_thread_in_a_timed_wait": (
        GATED + "e = ev.Event(); e.record(x)\n"
        "threading.Thread(target=lambda: e.wait(timeout=1.0)).start()\n"
        "threading.Thread(target=lambda: ev.wait_all([e, x], timeout=1.0)).start()\n"
        "time.sleep(0.1)\n", PROMPT_S),
    # daemon threads blocked in the waits test_interrupt.py's exit scenarios leave out
    "daemon_threads_in_every_other_wait": (
        GATED + "e = ev.Event(); e.record(x)\n"
        "import numpy as np\n"
        "waits = [lambda: ev.wait_all([e]), lambda: ev.wait_any([e, u]), ev.synchronize,\n"
        "         s.synchronize, x.wait, lambda: np.from_dlpack(x), lambda: e.wait(3600)]\n"
        "for w in waits:\n"
        "    threading.Thread(target=w, daemon=True).start()\n"
        "time.sleep(0.2)\n", PROMPT_S),
    # the freeze's recipe at exit: events whose two records failed with two Python exceptions,
    # polled by daemon threads that hold the GIL, failed from a timer thread as the process exits
    "events_failed_by_python_exceptions_polled": (
        "class Boom(Exception): pass\n"
        "events = []\n"
        "fails = []\n"
        "for i in range(50):\n"
        "    u1, u2 = ev.UserEvent(), ev.UserEvent()\n"
        "    s1, s2 = ev.Stream('cpu'), ev.Stream('cpu')\n"
        "    s1.wait(u1); s2.wait(u2)\n"
        "    with s1:\n        x1 = ev.rand(4)\n"
        "    with s2:\n        x2 = ev.rand(4)\n"
        "    e = ev.Event(); e.record(x1); e.record(x2); events.append(e)\n"
        "    u2.fail(Boom(f'two {i}'))\n"
        "    fails.append((u1, Boom(f'one {i}')))\n"
        "def poll():\n"
        "    while True:\n"
        "        for e in events:\n"
        "            e.poll(); e.status; e.error\n"
        "for _ in range(2):\n"
        "    threading.Thread(target=poll, daemon=True).start()\n"
        "def fail_all(items):\n"
        "    for u1, exc in items:\n"
        "        u1.fail(exc)\n"
        "threading.Timer(0.05, fail_all, args=(fails,)).start()\n"
        "del fails\n"
        "time.sleep(0.05)\n", PROMPT_S),
    # Python objects that only the runtime still holds: the arrays and DLPack producers of
    # pending ops, the exceptions of failed UserEvents, the closures of pending callbacks
    "python_objects_only_the_runtime_holds": (
        "import numpy as np\n"
        "def setup():\n" +
        "".join("    " + line + "\n" for line in GATED.splitlines()) +
        "    a = ev.from_numpy(np.arange(4096, dtype=np.float32))\n"
        "    b = ev.from_dlpack(np.ones(4096, dtype=np.float32))\n"
        "    with s:\n"
        "        y = a + b\n"
        "    y.add_completion_callback(lambda a=a, payload=bytearray(10**6): None)\n"
        "    g = ev.UserEvent(); s2 = ev.Stream('cpu'); s2.wait(g)\n"
        "    with s2:\n"
        "        z = a * b\n"
        "    g.fail(ValueError('held by a failed stream'))\n"
        "    e = ev.Event(); e.record(z)\n"
        "    e.add_callback(lambda e=e: None)\n"
        "    return u  # kept: its stream stays held back\n"
        "keep = setup()\n", PROMPT_S),
    # the child of a fork uses eventide, leaves work in flight and exits normally (not os._exit)
    "forked_child_exits_normally": (
        "import os\n" + GATED +
        "y = ev.rand(128, 128) @ ev.rand(128, 128); y.wait()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    g = ev.UserEvent(); s3 = ev.Stream('cpu'); s3.wait(g)\n"
        "    with s3:\n"
        "        z = y @ y\n"
        "    z.add_completion_callback(lambda: None)\n"
        "    w = y + y; w.wait(10)\n"
        "    sys.exit(0)\n"
        "end = time.monotonic() + 30\n"
        "while time.monotonic() < end:\n"
        "    done, status = os.waitpid(pid, os.WNOHANG)\n"
        "    if done == pid:\n"
        "        break\n"
        "    time.sleep(0.01)\n"
        "else:\n"
        "    os.kill(pid, 9); os.waitpid(pid, 0)\n"
        "    raise SystemExit('the forked child hung at exit')\n"
        "code = os.waitstatus_to_exitcode(status)\n"
        "assert code == 0, f'the forked child exited with {code}'\n", 2 * PROMPT_S),
}


# Threads keep enqueueing, recording, waiting, failing UserEvents and polling while the process
# exits (and others loop on short waits): after the runtime has shut down, eventide calls raise
# or fail their work.
THREADS_STILL_CALLING_EVENTIDE = (
        "def hammer():\n"
        "    s = ev.Stream('cpu')\n"
        "    a = ev.ones(64, 64)\n"
        "    while True:\n"
        "        try:\n"
        "            with s:\n"
        "                y = a @ a\n"
        "            e = ev.Event(); e.record(y); e.add_callback(lambda: None)\n"
        "            e.poll(); e.wait(0.001); repr(e)\n"
        "            g = ev.UserEvent(); s2 = ev.Stream('cpu'); s2.wait(g)\n"
        "            with s2:\n"
        "                z = y + a\n"
        "            g.fail(ValueError('no'))\n"
        "            z.error\n"
        "        except ev.EventideError:\n"
        "            pass\n"
        "never = ev.UserEvent()\n"
        "def spin():\n"
        "    while True:\n"
        "        never.wait(0.0005)\n"
        "for target in [hammer] * 3 + [spin] * 9:\n"
        "    threading.Thread(target=target, daemon=True).start()\n"
        "time.sleep(0.3)\n")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_exit_while_work_runs(name):
    code, within = SCENARIOS[name]
    elapsed, _ = exit_cleanly(code, within)
    if name == "matmul_running":
        # Running work finishes (queued work fails): the exit waits for that matmul (about a
        # second), not for the whole grace period.
        assert elapsed < GRACE_S + 3.0, f"exit took {elapsed:.1f} s"
    if name == "non_daemon_thread_in_a_timed_wait":
        assert elapsed >= 1.0, "the exit did not wait for the non-daemon thread"


@pytest.mark.time_limit(60)
def test_exit_with_a_matmul_running_past_the_grace_period():
    # The child sizes a float64 matmul to take about 2.5 grace periods on this machine (from
    # its own 1500x1500 one), starts it and exits. The exit waits for that matmul past the
    # grace period: OpenBLAS's own teardown would hang forever on a call still running (it
    # did, before the runtime waited for BLAS calls in progress).
    code = (f"a = ev.rand(1500, 1500, dtype=ev.float64); a.wait()\n"
            "t0 = time.monotonic(); (a @ a).wait(); per = time.monotonic() - t0\n"
            f"n = int(1500 * ({2.5 * GRACE_S} / max(per, 1e-3)) ** (1 / 3))\n"
            "if 2 * n * n * 8 > 2 * 2 ** 30:\n"
            "    print(f'too big: {n}', flush=True)\n"
            "else:\n"
            "    a = ev.rand(n, n, dtype=ev.float64); a.wait()\n"
            "    b = a @ a\n"
            "    time.sleep(0.3)\n")
    _, out = exit_cleanly(code, within=GRACE_S + 15.0)
    if "too big" in out:
        pytest.skip(f"a matmul that outlasts the grace period needs too much memory here ({out})")


# A daemon thread inside Profiler.stop(), waiting (no limit) for held-back work.
PROFILER_STOP_ON_A_DAEMON_THREAD = (
    "p = ev.Profiler()\n" + GATED +
    "threading.Thread(target=lambda: p.stop(timeout=None), daemon=True).start()\n"
    "time.sleep(0.1)\n")


def exits_cleanly_every_time(code: str, runs: int = 24, at_once: int = 4) -> None:
    """For a crash that comes only some of the time: ``code`` ``runs`` times, ``at_once``
    children at once; each must print 'bye' and exit with status 0. (With a crash in 1 run of
    10, 24 runs see it 92 times in 100: the tests that use this for a known race are marked
    xfail without strict.)"""
    for _ in range(runs // at_once):
        children = [start_child("import eventide as ev, threading, time, sys\n" + code +
                                "print('bye', flush=True)\n") for _ in range(at_once)]
        for p in children:
            try:
                out, err = p.communicate(timeout=PROMPT_S * 2)
            except subprocess.TimeoutExpired:
                for q in children:
                    q.kill()
                pytest.fail("the interpreter hung at exit")
            assert p.returncode == 0 and "bye" in out, (p.returncode, out, err)


@pytest.mark.time_limit(120)
def test_exit_with_threads_still_inside_eventide_calls_never_crashes():
    exits_cleanly_every_time(THREADS_STILL_CALLING_EVENTIDE)


@pytest.mark.time_limit(120)
def test_exit_with_a_daemon_thread_in_profiler_stop_never_aborts():
    exits_cleanly_every_time(PROFILER_STOP_ON_A_DAEMON_THREAD)
