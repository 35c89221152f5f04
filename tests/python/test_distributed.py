"""eventide.distributed: collectives as stream ops across processes.

The checks that need several ranks live in distributed/worker.py and run under
``mpirun -np N`` here (each run under a timeout); the rest run in this process or in a plain
child process (MPI's singleton: one rank). They are skipped, saying why, where eventide was
built without MPI or no mpirun is found."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import eventide as ev

WORKER = Path(__file__).parent / "distributed" / "worker.py"
CAPS = ev.distributed.capabilities()
MPIRUN = shutil.which("mpirun") or shutil.which("mpiexec")

needs_mpi = pytest.mark.skipif(not CAPS["mpi"], reason="eventide was built without MPI (EVENTIDE_WITH_MPI)")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="no mpirun on PATH (Debian: openmpi-bin)")


def mpi_env() -> dict:
    env = dict(os.environ)
    # OpenMPI: allowed as root (CI's containers), and more ranks than cores (CI has two).
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", EVENTIDE_DEVICE="cpu")
    return env


def run(args: list, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=mpi_env(), capture_output=True, text=True, timeout=timeout)


def test_capabilities_say_what_this_build_has():
    assert set(CAPS) == {"mpi", "nccl", "launched"}
    assert all(isinstance(v, bool) for v in CAPS.values())
    assert CAPS["launched"] is False  # pytest was not started by mpirun


@needs_mpi
@needs_mpirun
@pytest.mark.time_limit(180)
@pytest.mark.parametrize("ranks", [2, 3])
def test_every_rank_passes_the_workers_checks(ranks):
    r = run([MPIRUN, "-np", str(ranks), sys.executable, str(WORKER)], timeout=150)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    for rank in range(ranks):
        assert f"rank {rank} of {ranks}: ok" in r.stdout, out[-4000:]


@needs_mpi
@needs_mpirun
@pytest.mark.time_limit(180)
def test_is_initialized_never_waits_for_init_or_finalize_on_another_thread():
    script = Path(__file__).parent / "distributed" / "waits_with_the_gil.py"
    r = run([MPIRUN, "-np", "2", sys.executable, str(script)], timeout=150)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    for rank in range(2):
        assert f"rank {rank} of 2: ok" in r.stdout, out[-4000:]


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "overlap_allreduce.py"


def _cli() -> Path:
    if os.environ.get("EVENTIDE_CLI"):
        return Path(os.environ["EVENTIDE_CLI"])
    return Path(ev.__file__).resolve().parents[2] / "tools" / "eventide"


@needs_mpi
@needs_mpirun
@pytest.mark.time_limit(180)
def test_the_overlap_example_writes_a_trace_per_rank_that_merge_puts_on_one_clock(tmp_path):
    env = mpi_env()
    env["TMPDIR"] = str(tmp_path)  # where the example writes its traces
    r = subprocess.run([MPIRUN, "-np", "2", sys.executable, str(EXAMPLE)], env=env,
                       capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "rank 0 of 2" in r.stdout and "rank 1 of 2" in r.stdout and "hidden behind compute" in r.stdout
    traces = sorted(tmp_path.glob("eventide_overlap_rank*.json"))
    assert [t.name for t in traces] == ["eventide_overlap_rank0.json", "eventide_overlap_rank1.json"]
    cli = _cli()
    if not cli.exists():
        pytest.skip(f"the eventide program is not built ({cli})")
    merged = tmp_path / "merged.json"
    m = subprocess.run([str(cli), "trace", "merge", "-o", str(merged), *map(str, traces)],
                       capture_output=True, text=True, timeout=60)
    assert m.returncode == 0, m.stdout + m.stderr
    import json
    data = json.loads(merged.read_text())
    names = {e["args"]["name"] for e in data["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert any(n.startswith("rank 0") for n in names) and any(n.startswith("rank 1") for n in names), names
    reduces = [e for e in data["traceEvents"] if e.get("name") == "all_reduce" and e.get("ph") == "X"]
    assert len({e["pid"] for e in reduces}) == 2, "both ranks' all_reduces are in the merged trace"


SINGLE = r"""
import eventide as ev, numpy as np
comm = ev.distributed.init(device="cpu")
assert (comm.rank, comm.size) == (0, 1), comm
assert comm.clock_offset_ns == 0
t = ev.tensor(np.arange(5, dtype=np.float64))
np.testing.assert_array_equal(comm.all_reduce(t).numpy(), np.arange(5))
np.testing.assert_array_equal(comm.all_gather(t).numpy(), np.arange(5))
np.testing.assert_array_equal(comm.reduce_scatter(t).numpy(), np.arange(5))
assert comm.barrier().wait(timeout=20)
def refused(fn, kind, words):
    try:
        fn()
    except kind as e:
        assert words in str(e), str(e)
    else:
        raise AssertionError(f"accepted: {words}")
refused(lambda: comm.send(t, dst=0), ev.InvalidArgumentError, "is this rank")
refused(lambda: comm.recv((2,), src=1), ev.InvalidArgumentError, "not a rank")
refused(lambda: comm.broadcast(t, root=1), ev.InvalidArgumentError, "not a rank")
refused(lambda: comm.all_reduce(ev.ones((2,), dtype=ev.int32), op="avg"), ev.InvalidArgumentError, "floating")
refused(lambda: ev.distributed.init(device="cuda:0"), ev.InvalidArgumentError, "cuda:0")
gate = ev.UserEvent()
s = ev.Stream("cpu")
s.wait(gate)
with s:
    held = comm.all_reduce(t)
assert ev.distributed.finalize(timeout=0.05) is False  # the held collective has not run
refused(lambda: comm.all_reduce(t), ev.EventStateError, "finalized")
import threading, time
threading.Timer(0.5, gate.set).start()
start = time.monotonic()
# No limit means no limit (inf overflowed into a deadline in the past: False at once).
assert ev.distributed.finalize(timeout=float("inf")) is True
assert time.monotonic() - start >= 0.4
assert held.wait(timeout=20)
assert ev.distributed.finalize(timeout=10) is True   # a later call ends what the first could not
assert ev.distributed.finalize(timeout=10) is True
assert not ev.distributed.is_initialized()
refused(lambda: comm.all_reduce(t), ev.EventStateError, "finalized")
refused(lambda: ev.distributed.init(), ev.EventStateError, "finalized")
print("single ok")
"""


@needs_mpi
@pytest.mark.time_limit(120)
def test_one_process_without_mpirun_is_a_communicator_of_one():
    r = run([sys.executable, "-c", SINGLE], timeout=90)
    assert r.returncode == 0 and "single ok" in r.stdout, (r.stdout + r.stderr)[-4000:]


RANK_LEAVES = r"""
import os, signal, sys, eventide as ev, numpy as np
comm = ev.distributed.init(device="cpu")
if comm.rank == 1:  # before its part of the all_reduce
    how = sys.argv[1]
    if how == "exception":
        raise RuntimeError("boom before my part of the all_reduce")
    if how == "signal":
        os.kill(os.getpid(), signal.SIGTERM)
    if how == "abort":  # what an uncaught C++ exception ends in (std::terminate)
        os.abort()
    if how == "exit":  # no traceback, no excepthook: only the exit status says it
        sys.exit(1)
    if how == "exit-message":
        sys.exit("giving up")  # status 1, the message on stderr
out = comm.all_reduce(ev.tensor(np.ones(4)))  # rank 0 waits for rank 1's part
out.wait()
"""


@needs_mpi
@needs_mpirun
@pytest.mark.time_limit(120)
@pytest.mark.parametrize("how", ["exception", "signal", "abort", "exit", "exit-message"])
def test_a_rank_that_leaves_on_an_error_ends_the_job_within_seconds(how):
    # Before, for an exception: rank 1 waited in MPI_Finalize (eventide's exit hook) for rank
    # 0, which waited for rank 1's part of the all_reduce: the job never ended. The same for
    # sys.exit(1) (seen: no end within 60 s; now 0.5 s).
    start = time.monotonic()
    r = run([MPIRUN, "-np", "2", sys.executable, "-c", RANK_LEAVES, how], timeout=90)
    took = time.monotonic() - start
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-4000:]
    if how == "exception":
        assert "RuntimeError: boom" in r.stderr, out[-4000:]  # the traceback, first
        assert "rank 1 of 2 leaves on an error (RuntimeError: boom" in r.stderr, out[-4000:]
    if how.startswith("exit"):
        assert "rank 1 of 2 leaves on an error (exit status 1)" in r.stderr, out[-4000:]
    assert took < 30, f"the job took {took:.1f} s to end"


RANK_LEAVES_CPP = os.environ.get("EVENTIDE_RANK_LEAVES") or str(
    Path(ev.__file__).resolve().parents[2] / "tests" / "cpp" / "rank_leaves")


@needs_mpi
@needs_mpirun
@pytest.mark.skipif(not Path(RANK_LEAVES_CPP).exists(), reason=f"tests/cpp/rank_leaves is not built ({RANK_LEAVES_CPP})")
@pytest.mark.time_limit(120)
@pytest.mark.parametrize("how, says", [("throw", None), ("exit", "exit status 3"), ("return", "exit status 1")])
def test_a_cpp_rank_that_leaves_on_an_error_ends_the_job_within_seconds(how, says):
    # A C++ program's rank: an uncaught exception (std::terminate: SIGABRT, which mpirun sees),
    # exit(3), or main returning 1 (eventide's exit hook sees the status).
    start = time.monotonic()
    r = run([MPIRUN, "-np", "2", RANK_LEAVES_CPP, how], timeout=90)
    took = time.monotonic() - start
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-4000:]
    if how == "throw":
        assert "boom before my part" in r.stderr, out[-4000:]  # std::terminate's what()
    if says:
        assert f"rank 1 of 2 leaves on an error ({says})" in r.stderr, out[-4000:]
    assert took < 30, f"the job took {took:.1f} s to end"


@needs_mpi
@needs_mpirun
@pytest.mark.time_limit(120)
def test_a_successful_exit_still_waits_for_the_slower_rank():
    # The exit hook ends the job only for a failure status: a rank that finishes first with
    # status 0 waits in MPI_Finalize for the others, as before.
    prog = r"""
import time, eventide as ev
comm = ev.distributed.init(device="cpu")
if comm.rank == 0:
    time.sleep(2)
    print("rank 0 finished its work", flush=True)
"""
    r = run([MPIRUN, "-np", "2", sys.executable, "-c", prog], timeout=90)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "rank 0 finished its work" in r.stdout
    assert "leaves on an error" not in r.stderr


MISMATCHED = r"""
import eventide as ev
comm = ev.distributed.init(device="cpu")
r = comm.rank
def attempt(what, fn, words):
    try:
        fn().wait()
    except ev.EventideError as e:
        assert words in str(e), (what, str(e))
        print(f"rank {r} {what}: refused", flush=True)
    else:
        raise AssertionError(f"rank {r} {what}: no error")
attempt("count", lambda: comm.all_reduce(ev.ones(1000 if r == 0 else 2**20)), "element count differs")
attempt("dtype", lambda: comm.all_reduce(ev.ones(8, dtype=ev.float32 if r == 0 else ev.float64)), "dtype differs")
attempt("int", lambda: comm.all_reduce(ev.ones(8, dtype=ev.float32 if r == 0 else ev.int32)), "float32 on some rank, int32")
attempt("op", lambda: comm.all_reduce(ev.ones(8), op="sum" if r == 0 else "max"), "the op differs: sum")
attempt("root", lambda: comm.broadcast(ev.ones(8), root=r), "root differs")
attempt("kind", lambda: comm.barrier() if r == 0 else comm.all_reduce(ev.ones(1)), "the collective differs")
if r == 0:
    comm.send(ev.ones(4, dtype=ev.float64), dst=1).wait()
else:
    attempt("recv", lambda: comm.recv((8,), src=0, dtype=ev.float32), "sent 4 elements of float64, recv expected 8 of float32")
assert comm.all_reduce(ev.ones(4)).numpy().tolist() == [2.0] * 4  # and the job goes on
try:  # refused before its output is allocated (it was out of memory)
    comm.recv((1 << 40,), src=1 - r)
except ev.InvalidArgumentError as e:
    assert "more than mpi carries" in str(e), str(e)
else:
    raise AssertionError("a recv of 2^40 elements was accepted")
print(f"rank {r} mismatches ok", flush=True)
"""


@needs_mpi
@needs_mpirun
@pytest.mark.time_limit(120)
def test_mismatched_collectives_fail_on_every_rank_by_name():
    # Before: a SIGSEGV on the smaller rank, garbage for float32 against int32, a recv of
    # another dtype reinterpreted.
    r = run([MPIRUN, "-np", "2", sys.executable, "-c", MISMATCHED], timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "rank 0 mismatches ok" in r.stdout and "rank 1 mismatches ok" in r.stdout, out[-4000:]


EXIT_ONCE = r"""
import eventide as ev, numpy as np
comm = ev.distributed.init(device="cpu")
gate = ev.UserEvent()
s = ev.Stream("cpu")
s.wait(gate)
with s:
    held = comm.all_reduce(ev.tensor(np.ones(4)))
assert ev.distributed.finalize(timeout=0.2) is False  # the program's own call gives up
print("exiting", flush=True)
"""


@needs_mpi
@pytest.mark.time_limit(120)
def test_the_exit_after_a_finalize_that_gave_up_waits_no_more_and_warns_once():
    start = time.monotonic()
    r = run([sys.executable, "-c", EXIT_ONCE], timeout=90)
    took = time.monotonic() - start
    assert "exiting" in r.stdout, (r.stdout + r.stderr)[-4000:]
    # Python's exit step and C++'s each waited their 10 s before, and each said so.
    assert r.stderr.count("collectives are still running") == 1, r.stderr
    assert took < 8, f"the exit waited again: {took:.1f} s"


@pytest.mark.skipif(CAPS["mpi"], reason="this build has MPI: the message for builds without it is not reachable")
def test_init_without_mpi_says_how_to_get_it():
    with pytest.raises(ev.EventStateError, match="no MPI"):
        ev.distributed.init()


TORCH_NCCL = r"""
import os
import eventide  # first: its libraries are loaded before PyTorch's
import torch, torch.distributed as td
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29000 + os.getpid() % 1000))
torch.cuda.set_device(0)
td.init_process_group("nccl", rank=0, world_size=1)
x = torch.ones(4, device="cuda")
td.all_reduce(x)
torch.cuda.synchronize()
td.destroy_process_group()
print("torch ok", x.sum().item())
"""


@pytest.mark.time_limit(120)
def test_pytorchs_nccl_works_in_a_process_that_imported_eventide_first():
    # (Seen on the GPU machine, whose compiler links libstdc++ statically: eventide's copies of
    # its symbols interposed on PyTorch's and the process crashed in std::locale's destructor.)
    probe = subprocess.run([sys.executable, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
                           capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("needs PyTorch with a CUDA GPU (run on the GPU machine)")
    r = subprocess.run([sys.executable, "-c", TORCH_NCCL], capture_output=True, text=True, timeout=100)
    assert r.returncode == 0 and "torch ok 4.0" in r.stdout, (r.stdout + r.stderr)[-3000:]


MORE_RANKS_THAN_GPUS = r"""
import eventide as ev
try:
    ev.distributed.init()
except ev.InvalidArgumentError as e:
    assert "NCCL needs a GPU of its own per rank" in str(e) and "device=cpu" in str(e), str(e)
    print("refused", flush=True)
else:
    raise AssertionError("two ranks were given one GPU")
"""


@needs_mpi
@needs_mpirun
@pytest.mark.time_limit(120)
def test_more_ranks_than_gpus_on_a_machine_is_refused_by_name():
    gpus = [d for d in ev.devices() if str(d).startswith("cuda")]
    if not CAPS["nccl"] or len(gpus) != 1:
        pytest.skip("needs eventide with NCCL on a machine of exactly one GPU (the GPU machine)")
    env = mpi_env()
    env["EVENTIDE_DEVICE"] = "cuda"
    r = subprocess.run([MPIRUN, "-np", "2", sys.executable, "-c", MORE_RANKS_THAN_GPUS], env=env,
                       capture_output=True, text=True, timeout=100)
    assert r.returncode == 0 and r.stdout.count("refused") == 2, (r.stdout + r.stderr)[-3000:]


# One process driving several GPUs: init_local, a communicator (a rank) per device, each
# driven by a thread of its own (NCCL's rule).
needs_nccl = pytest.mark.skipif(not CAPS["nccl"], reason="eventide was built without NCCL (EVENTIDE_WITH_NCCL)")
GPUS = [str(d) for d in ev.devices() if str(d).startswith("cuda")]


@needs_nccl
def test_init_local_refuses_a_bad_list_of_devices_by_name():
    cases = [([], "no devices given"), (["cpu"], "cpu is not a CUDA GPU"),
             (["cuda:99"], "the device cuda:99 is not available")]
    if GPUS:
        cases += [([GPUS[0], GPUS[0]], f"{GPUS[0]} is named twice"), ([GPUS[0], "cpu"], "cpu is not a CUDA GPU")]
    for devices, words in cases:
        with pytest.raises(ev.InvalidArgumentError, match=words):
            ev.distributed.init_local(devices)
    assert not ev.distributed.is_initialized()  # nothing was made


INIT_LOCAL = r"""
import sys, threading
import numpy as np
import eventide as ev

devices = sys.argv[1:]
comms = ev.distributed.init_local(devices)
n = len(devices)
assert [c.rank for c in comms] == list(range(n)) and {c.size for c in comms} == {n}, comms
assert [str(c.device) for c in comms] == devices and all(c.transport(c.device) == "nccl" for c in comms)
results, errors = [None] * n, []


def drive(c):
    # Each rank on its own thread and stream: one thread issuing every rank's collectives
    # would wait on itself inside NCCL.
    try:
        with ev.Stream(c.device):
            x = ev.full((1 << 16,), float(c.rank + 1), device=c.device)
            total = c.all_reduce(x, op="sum")
            done = ev.Event()
            done.record(total)
            gathered = c.all_gather(ev.full((2,), float(c.rank), device=c.device))
            into = ev.zeros((1 << 16,), device=c.device)
            c.all_reduce(x, op="max", out=into)
            assert done.wait(timeout=60), "the all_reduce did not finish"
            assert done.time_elapsed() > 0
            results[c.rank] = (total.numpy(), gathered.numpy(), into.numpy())
    except BaseException as e:  # reported by the main thread
        errors.append(f"rank {c.rank}: {e!r}")


threads = [threading.Thread(target=drive, args=(c,)) for c in comms]
for t in threads:
    t.start()
for t in threads:
    t.join(90)
assert not any(t.is_alive() for t in threads), "a rank's thread is stuck"
assert not errors, errors
for total, gathered, into in results:
    np.testing.assert_array_equal(total, np.full(1 << 16, n * (n + 1) / 2, dtype=np.float32))
    np.testing.assert_array_equal(gathered, np.repeat(np.arange(n, dtype=np.float32), 2))
    np.testing.assert_array_equal(into, np.full(1 << 16, float(n), dtype=np.float32))
assert ev.distributed.finalize(30)
print("init_local ok", n)
"""


@needs_nccl
@pytest.mark.time_limit(180)
@pytest.mark.parametrize("count", [1, 2])
def test_init_local_drives_each_gpu_from_a_thread_of_its_own(count):
    if len(GPUS) < count:
        pytest.skip(f"needs {count} CUDA device(s), eventide sees {len(GPUS)} (run scripts/gpu-check.sh on the GPU machine)")
    r = subprocess.run([sys.executable, "-c", INIT_LOCAL, *GPUS[:count]], capture_output=True, text=True, timeout=150)
    assert r.returncode == 0 and f"init_local ok {count}" in r.stdout, (r.stdout + r.stderr)[-4000:]
