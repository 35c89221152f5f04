"""Under ``mpirun -np N``: calls made with the GIL held never wait for init() or finalize(),
which hold the process's communicator lock across waits for the other ranks (with the GIL let
go). Each part would freeze, or make finalize() give up, if is_initialized() waited for that
lock: the thread that holds it waits for work that only the main thread can release.
faulthandler (which needs no GIL) ends a frozen run with the threads' stacks.
"""
import faulthandler
import threading
import time

import eventide as ev

LIMIT_S = 60
faulthandler.dump_traceback_later(LIMIT_S, exit=True)

# 1. init() on another thread, whose current stream is held behind a UserEvent that the main
# thread sets only after it has asked is_initialized(). (init's barrier runs on a stream of its
# own, so it is not held; is_initialized() never waits.)
held = ev.Stream("cpu")
gate = ev.UserEvent()
held.wait(gate)
made = {}


def do_init():
    with held:
        made["comm"] = ev.distributed.init(device="cpu")


t = threading.Thread(target=do_init, daemon=True)
t.start()
time.sleep(0.3)
ev.distributed.is_initialized()
gate.set()
t.join(LIMIT_S)
assert "comm" in made, "init did not return"
comm = made["comm"]
assert ev.distributed.is_initialized()

# 2. finalize() on another thread waits for a collective held behind a UserEvent; the main
# thread asks is_initialized() before it sets the gate.
s = ev.Stream("cpu")
gate = ev.UserEvent()
s.wait(gate)
with s:
    out = comm.all_reduce(ev.ones((4,)))
result = {}
t = threading.Thread(target=lambda: result.setdefault("clean", ev.distributed.finalize(timeout=20.0)))
t.start()
time.sleep(0.3)
t0 = time.monotonic()
ev.distributed.is_initialized()
blocked = time.monotonic() - t0
gate.set()
t.join(LIMIT_S)
assert blocked < 1.0, f"is_initialized() waited {blocked:.1f} s for finalize()"
assert result.get("clean") is True, f"finalize gave up on a collective that could finish: {result}"
assert not ev.distributed.is_initialized()
faulthandler.cancel_dump_traceback_later()
print(f"rank {comm.rank} of {comm.size}: ok", flush=True)
