"""Events across processes: export_event, import_event, ExportedEvent (eventide/ipc.hpp).

The other process is a Python child (subprocess, this interpreter) that talks over its stdin
(commands, one per line) and stdout (the handle, results). Every wait has a timeout, and every
child is killed at the end of its test whatever happens.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time

import pytest

import eventide as ev

def _leftover_blocks(before: set) -> set:
    """Names of eventide's blocks in /dev/shm made since `before` that no live process but this
    one could still remove: this process's, and those of exporters that have died."""
    left = set()
    for name in set(os.listdir("/dev/shm")) - before:
        parts = name.split(".")
        if parts[0] != "eventide" or len(parts) < 2 or not parts[1].isdigit():
            continue  # (forged names of ipc_test's, other files)
        pid = int(parts[1])
        if pid == os.getpid() or not os.path.exists(f"/proc/{pid}"):
            left.add(name)
    return left


@pytest.fixture(autouse=True)
def no_block_or_descriptor_left_behind():
    """Every test leaves /dev/shm and this process's descriptors as it found them (after a few
    seconds for the watcher and callbacks to let go)."""
    blocks = set(os.listdir("/dev/shm"))
    fds = len(os.listdir("/proc/self/fd"))
    yield
    deadline = time.monotonic() + 10
    while (_leftover_blocks(blocks) or len(os.listdir("/proc/self/fd")) > fds + 2) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _leftover_blocks(blocks), "blocks left in /dev/shm"
    assert len(os.listdir("/proc/self/fd")) <= fds + 2, "descriptors left open"


# A child that exports an event gated by a UserEvent and obeys: set, fail, die, poll, exit.
EXPORTER = textwrap.dedent(
    """
    import os, sys
    import eventide as ev
    device = sys.argv[1]
    gate = ev.UserEvent()
    s = ev.Stream(device)
    s.wait(gate)
    work = s.record_event()
    x = ev.export_event(work)
    print(x.handle, flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "set":
            gate.set()
        elif cmd == "fail":
            gate.fail(ValueError("boom from the exporter"))
        elif cmd == "die":
            os._exit(3)
        elif cmd == "poll":
            print("done" if work.poll() else "pending", flush=True)
        else:
            break
    """
)

# A child that imports a handle on a device, has a stream wait on it, and says what happened.
IMPORTER = textwrap.dedent(
    """
    import sys
    import eventide as ev
    handle, device = sys.argv[1], sys.argv[2]
    try:
        e = ev.import_event(handle, device)
        print("pending-at-import" if not e.poll() else "done-at-import", flush=True)
        s = ev.Stream(device)
        s.wait(e)
        s.record_event().wait(30)
        print("stream-passed", flush=True)
        if not e.wait(30):
            print("timeout", flush=True)
        else:
            print("ok", flush=True)
    except Exception as exc:
        print("error:", type(exc).__name__, exc, flush=True)
    """
)


class Child:
    def __init__(self, script: str, *args: str) -> None:
        env = dict(os.environ)
        self.p = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def line(self, timeout: float = 60.0) -> str:
        # readline blocks; the deadline is the test's: a child that says nothing is killed.
        import threading

        out: list[str] = []
        t = threading.Thread(target=lambda: out.append(self.p.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not out:
            self.kill()
            pytest.fail(f"the child said nothing within {timeout} s")
        return out[0].strip()

    def send(self, cmd: str) -> None:
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def join(self, timeout: float = 60.0) -> int:
        return self.p.wait(timeout)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(30)

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.p.poll() is None:
                try:
                    self.send("exit")
                except OSError:
                    pass
                try:
                    self.p.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            self.kill()
            self.p.stdin.close()
            self.p.stdout.close()


def finishes(e: ev.Event, timeout: float) -> bool:
    """Whether `e` finished (or failed) within `timeout` s, without raising its error."""
    return ev.wait_any([e], timeout) is not None


# --- one process ---------------------------------------------------------------------------


def test_round_trip_in_one_process():
    gate = ev.UserEvent()
    x = ev.export_event(gate)
    assert x.handle.startswith("eventide-ipc:1:")
    assert not x.native
    assert x.event == gate
    e = ev.import_event(x.handle)
    assert e.device == ev.Device("cpu")
    assert e.status == "pending"
    assert e.wait(0.03) is False
    gate.set()
    assert e.wait(10) is True
    assert e.status == "finished"
    # Device times do not cross processes.
    assert e.enable_timing is False
    with pytest.raises(ev.EventStateError):
        e.time_elapsed()


def test_failure_text_crosses():
    gate = ev.UserEvent()
    x = ev.export_event(gate)
    e = ev.import_event(x.handle)
    gate.fail(KeyError("the exporter's words"))
    assert finishes(e, 10)
    assert e.status == "failed"
    with pytest.raises(ev.OpError, match="the exporter's words"):
        e.wait(10)


def test_an_earlier_failure_of_the_event_is_not_lost_by_its_pending_work():
    # An event keeps every record: one failed already, one pending behind a gate. The import
    # must fail once the gate is set, not succeed with the pending record alone.
    bad, gate = ev.UserEvent(), ev.UserEvent()
    a, b = ev.Stream("cpu"), ev.Stream("cpu")
    a.wait(bad)
    b.wait(gate)
    bad.fail(KeyError("the first record's failure"))
    e = ev.Event()
    e.record(a)
    e.record(b)
    x = ev.export_event(e)
    imported = ev.import_event(x.handle, "cpu")
    assert not finishes(imported, 0.05)
    gate.set()
    assert finishes(imported, 10)
    assert imported.status == "failed"
    with pytest.raises(ev.OpError, match="the first record's failure"):
        imported.wait(10)


def test_bad_input_is_named():
    with pytest.raises(ev.InvalidArgumentError, match="not an eventide event handle"):
        ev.import_event("not a handle")
    with pytest.raises(ev.InvalidArgumentError, match="no exported event"):
        ev.import_event("eventide-ipc:1:eventide.1.2.deadbeef")
    with pytest.raises(ev.EventStateError, match="EMPTY"):
        ev.export_event(ev.Event())
    gate = ev.UserEvent()
    with ev.export_event(gate) as x:
        handle = x.handle
    with pytest.raises(ev.InvalidArgumentError, match="no exported event"):
        ev.import_event(handle)
    gate.set()


def test_asyncio_awaits_an_imported_event():
    gate = ev.UserEvent()
    x = ev.export_event(gate)
    e = ev.import_event(x.handle)

    async def main():
        asyncio.get_running_loop().call_later(0.05, gate.set)
        await asyncio.wait_for(e, 10)

    asyncio.run(main())
    assert e.status == "finished"


# --- across processes ------------------------------------------------------------------------


def test_host_wait_for_another_processes_work():
    with Child(EXPORTER, "cpu") as c:
        e = ev.import_event(c.line())
        assert e.wait(0.1) is False
        c.send("set")
        assert e.wait(30) is True
        assert e.error is None


def test_failure_crosses_processes():
    with Child(EXPORTER, "cpu") as c:
        e = ev.import_event(c.line())
        c.send("fail")
        assert finishes(e, 30)
        with pytest.raises(ev.OpError, match="boom from the exporter") as info:
            e.wait(1)
        assert str(c.p.pid) in str(info.value)


def test_exporter_death_fails_the_import():
    with Child(EXPORTER, "cpu") as c:
        e = ev.import_event(c.line())
        s = ev.Stream("cpu")
        s.wait(e)
        after = s.record_event()
        c.send("die")
        start = time.monotonic()
        assert finishes(e, 30)
        assert time.monotonic() - start < 5
        with pytest.raises(ev.OpError, match=f"process {c.p.pid}.*exited or was killed"):
            e.wait(1)
        assert finishes(after, 30)
        assert after.status == "failed"
        assert c.join() == 3


# A child whose exported work finishes just before it exits, while the completion callback
# that sets the export's word is still queued: the CPU's callback thread is kept busy by a
# callback of its own, and the runtime's shutdown drops the callbacks still queued.
EXITS_RIGHT_AFTER = textwrap.dedent(
    """
    import sys, time
    import eventide as ev
    busy = ev.Event()
    busy.record(ev.ones(1, device="cpu"))
    busy.wait()
    gate = ev.UserEvent()
    s = ev.Stream("cpu")
    s.wait(gate)
    work = s.record_event()
    x = ev.export_event(work)
    print(x.handle, flush=True)
    sys.stdin.readline()  # the parent has imported it
    busy.add_callback(lambda: time.sleep(1.0))  # the cpu's callback thread, for a second
    time.sleep(0.1)
    gate.set()
    assert work.wait(30)
    print("finished", flush=True)
    """
)


def test_work_that_finished_just_before_the_exporter_exited_reads_finished():
    with Child(EXITS_RIGHT_AFTER) as c:
        e = ev.import_event(c.line())
        c.send("go")
        assert c.line() == "finished"
        assert c.join(60) == 0
        assert e.wait(30) is True  # not "process ... exited or was killed before the event finished"
        assert e.error is None


def test_cpu_stream_waits_for_an_imported_event():
    with Child(EXPORTER, "cpu") as c:
        e = ev.import_event(c.line(), "cpu")
        s = ev.Stream("cpu")
        s.wait(e)
        after = s.record_event()
        assert after.wait(0.1) is False
        c.send("set")
        assert after.wait(30) is True


def test_another_process_waits_for_ours():
    gate = ev.UserEvent()
    s = ev.Stream("cpu")
    s.wait(gate)
    work = s.record_event()
    with ev.export_event(work) as x, Child(IMPORTER, x.handle, "cpu") as c:
        assert c.line() == "pending-at-import"
        gate.set()
        assert c.line() == "stream-passed"
        assert c.line() == "ok"


def test_another_process_sees_our_failure():
    gate = ev.UserEvent()
    with ev.export_event(gate) as x, Child(IMPORTER, x.handle, "cpu") as c:
        assert c.line() == "pending-at-import"
        gate.fail(RuntimeError("parent says no"))
        said = c.line()
        assert said.startswith("error: OpError") and "parent says no" in said, said


# --- the GPU path (on a machine with a CUDA device) -------------------------------------------

needs_gpu = pytest.mark.skipif(not ev.is_available("cuda:0"),
                               reason="no CUDA device here: the GPU path of ipc runs on a GPU machine")


@needs_gpu
def test_gpu_stream_waits_for_another_processes_gpu_work():
    with Child(EXPORTER, "cuda:0") as c:
        e = ev.import_event(c.line(), "cuda:0")
        s = ev.Stream("cuda:0")
        s.wait(e)
        after = s.record_event()
        assert after.wait(0.1) is False  # the exporter's work is held behind its gate
        c.send("set")
        assert after.wait(30) is True
        c.send("poll")
        assert c.line() == "done"
        assert e.wait(30) is True


@needs_gpu
def test_gpu_export_refuses_a_gpu_import_in_the_same_process():
    s = ev.Stream("cuda:0")
    e = s.record_event()
    with ev.export_event(e) as x:
        assert x.native
        with pytest.raises(ev.InvalidArgumentError, match="this process"):
            ev.import_event(x.handle, "cuda:0")
        assert ev.import_event(x.handle, "cpu").wait(30)
