# Events across processes: this process does some work and exports its event; a second
# process (started here with subprocess) imports the handle, has a stream wait on it, and waits
# on the host. The handle is a plain string: pass it by any channel (here, the command line).
#
# On a machine with a GPU, export a CUDA event and import it on "cuda:0": the other process's
# streams then wait on the GPU itself (a CUDA IPC event), with no host round trip.
import subprocess
import sys
import textwrap

import eventide as ev

# The work: a matmul held back until we open a gate, so that the other process really waits.
gate = ev.UserEvent()
s = ev.Stream("cpu")
s.wait(gate)
with ev.stream(s):
    out = ev.matmul(ev.rand(256, 256), ev.rand(256, 256))
done = ev.Event()
done.record(out)

# The other process: imports the event, waits for it with a stream and on the host.
CHILD = textwrap.dedent(
    """
    import sys
    import eventide as ev
    e = ev.import_event(sys.argv[1])        # an ordinary Event from here on
    print("imported:", e.status, flush=True)
    s = ev.Stream("cpu")
    s.wait(e)                                # later work on s runs after the other process's
    after = s.record_event()
    if not e.wait(60) or not after.wait(60):
        sys.exit("the exported event did not finish")
    print("finished in the other process:", e.status, flush=True)
    """
)

# Keep the ExportedEvent alive while the other process may import it (`with` closes it).
with ev.export_event(done) as exported:
    print("handle:", exported.handle)
    child = subprocess.Popen([sys.executable, "-c", CHILD, exported.handle],
                             stdout=subprocess.PIPE, text=True)
    print("child says", child.stdout.readline().strip())  # "imported: pending"
    gate.set()  # the matmul runs now; the other process's waits end after it
    print("child says", child.stdout.readline().strip())
    if child.wait(60) != 0:
        sys.exit("the other process failed")
    child.stdout.close()

print("our result is ready too:", out.ready)
