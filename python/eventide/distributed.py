"""eventide.distributed: collectives across processes and GPUs, as stream ops.

Launch the processes with ``mpirun`` (one rank each); each one calls ``init()``::

    import eventide as ev

    comm = ev.distributed.init()        # rank and size from mpirun; a GPU per rank where there are GPUs
    g = ev.randn(1024, device=comm.device)
    total = comm.all_reduce(g, op="sum")  # an op on the current stream: returns at once
    done = ev.Event()
    done.record(total)                  # tied to the collective
    done.wait()

Every collective is an eventide op on the current stream of its tensor's device, like
``ev.add``: it waits for the ops that produced its input, events recorded on its output are
tied to it, other streams wait on it, ``time_elapsed`` times it (the wait for the slowest
rank included), callbacks and ``await`` work, and the profiler draws it. CUDA tensors go
through NCCL, on the GPU with no host round trip; CPU tensors through MPI, on the stream's
worker thread.

Every rank must issue the collectives in the same order (as with MPI and NCCL); eventide
keeps the order of the calls across streams. A collective whose input failed is still
issued, so that the other ranks do not wait forever: it fails on this rank, and the other
ranks' results hold an undefined part from it. See docs/SCALE_OUT.md.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Sequence

from ._eventide import _distributed as _d

Communicator = _d.Communicator

__all__ = ["Communicator", "capabilities", "finalize", "init", "init_local", "is_initialized"]


def _end_the_job_on_an_unhandled_exception() -> None:
    """A rank that dies of an unhandled exception ends the whole job (MPI_Abort), after the
    traceback: its peers would otherwise wait for its collectives forever, and it for them in
    MPI_Finalize at exit. Installed once, by ``init()``; the hook it wraps runs first."""
    previous = sys.excepthook
    if getattr(previous, "_eventide_ends_the_job", False):
        return

    def hook(kind, value, tb):
        try:
            previous(kind, value, tb)
        finally:
            # (Ctrl-C included: an interrupted rank leaves its peers waiting as well.)
            try:
                reason = f"{kind.__name__}: {value}"
            except Exception:  # a __str__ that raises
                reason = kind.__name__
            _d._abort_job_on_error(1, reason)

    hook._eventide_ends_the_job = True
    sys.excepthook = hook


def init(device: Any = None) -> Communicator:
    """The process's communicator over every rank of the job, made on the first call.

    Starts MPI where nothing has (a program that started it, or mpi4py, is fine) and, for a
    GPU, makes the NCCL communicator (its id sent over MPI). ``device``: this rank's GPU;
    default ``cuda:(local rank)`` where the default device is a GPU (InvalidArgumentError if
    the machine's ranks outnumber its GPUs: NCCL needs one per rank), else ``cpu`` (MPI
    alone). Blocks until every rank has called it; later calls return the same communicator.
    Unlike eventide's other blocking calls, that wait cannot be interrupted with Ctrl-C: it is
    inside MPI's and NCCL's set-up calls (``mpirun`` ends the job if a rank dies first).

    Raises EventStateError where eventide was built without MPI, DeviceError if MPI or NCCL
    fails, InvalidArgumentError for a device that is not available.
    """
    comm = _d.init(device)
    _end_the_job_on_an_unhandled_exception()
    return comm


def init_local(devices: Sequence[Any]) -> List[Communicator]:
    """One process driving several GPUs: a communicator per device, rank i on ``devices[i]``.

    Needs NCCL (not MPI). NCCL needs each communicator driven by its own thread: issue each
    device's collectives from a thread of its own (``threading``), since one thread issuing
    the collectives of several would wait on itself. Blocks in NCCL's set-up of every device
    (not interruptible with Ctrl-C, like ``init``).
    """
    return _d.init_local(list(devices))


def is_initialized() -> bool:
    """Whether ``init()`` has made the process's communicator (and it is not finalized)."""
    return _d.is_initialized()


def finalize(timeout: Optional[float] = 10.0) -> bool:
    """Ends the process's communicators; later collectives raise EventStateError.

    Waits up to ``timeout`` seconds (None or ``inf``: no limit) for the collectives already
    issued, then tears down NCCL and ends MPI (where ``init`` started it), and returns True.
    If some are still running (a rank never issued its part), leaves NCCL and MPI as they are
    and returns False. Runs at process exit by itself (once: not again where it was called).
    """
    return _d.finalize(timeout)


def capabilities() -> Dict[str, bool]:
    """What this build and process can do: ``{'mpi': built with MPI, 'nccl': built with NCCL,
    'launched': started by mpirun with more than one rank}``."""
    return _d.capabilities()
