// eventide/ipc.hpp: events across processes on one machine.
//
// One process exports an event; another imports it by a handle, a printable string passed by
// any channel (a pipe, a file, an environment variable, MPI), and gets an ordinary `Event`:
// host code can wait(), wait_for(), poll() it, add callbacks, await it (Python's asyncio),
// put it in wait_any; a Stream can wait() on it.
//
//   // process A                              // process B
//   ev::Event done = ...record(...);          ev::Event e = ev::ipc::import_event(handle);
//   auto x = ev::ipc::export_event(done);     e.wait();            // the host waits, or
//   send(x.handle());                         stream.wait(e);      // a stream does
//   // keep `x` alive while B may import
//
// What an import covers: the work tied to the event when it was exported (a snapshot, like
// Stream::wait's); records made on the event later are not part of it.
//
// How it works:
// * The host path (every event): a small block of POSIX shared memory (/dev/shm), named in the
//   handle, holds a state word, the exporter's pid and, on failure, the error's text. The
//   exporter sets the word when the exported work has finished (a completion callback) and
//   wakes the importers (a futex on the shared word). One thread per importing process watches
//   its imports; an imported event finishes when the word says done, and FAILS with an OpError
//   carrying the exporter's error text when the word says failed. If the exporting process
//   exits (or is killed) before the word is set, the imported event fails with an OpError
//   naming its pid, within about 100 ms: it never hangs.
// * The GPU path (a CUDA event imported on a CUDA device): the exporter also records a CUDA
//   interprocess event (cudaEventInterprocess) on the GPU after the exported work, and only
//   then tells importers the native handle may be used (a CUDA event never recorded would read
//   complete at once). The importer opens it and its streams wait for it on the GPU
//   (cudaStreamWaitEvent): no host round trip. Where the exported work is still held on the
//   exporter's host when the import is made (behind a UserEvent or a CPU op), the importer's
//   streams hold their later work on the host until the record is made, as for a UserEvent.
//
// What crosses processes, and what does not:
// * Completion, failure (as text: the importer gets an OpError whose message carries the
//   exporter's what()), and, on the GPU path, the GPU-side ordering.
// * Not timing: device clocks of two processes are not comparable. An imported event has
//   timing disabled: time_elapsed() and elapsed_time() are StateErrors.
// * A stream's GPU-side wait orders after the exporter's work on the GPU alone; whether that
//   work failed is known to the importer only when the exporter's host learns it (the state
//   word). Host waits, poll(), error() and callbacks report it; a stream that waits after the
//   word says failed is broken as for any failed event, but one that waited earlier is not
//   (telling it would need the host round trip the GPU path avoids).
// * Same machine, same user (the block is made with mode 0600), same PID namespace.
//
// Lifetime: the exporter keeps the ExportedEvent alive while others may import it: dropping
// the last copy (or the process's exit) removes the block's name, so later imports fail
// ("no exported event ..."); events imported before go on to finish. An exporter killed by
// SIGKILL cannot remove the name: the first importer that finds it dead does.
//
// Fork: blocks and imports made before a fork() belong to the parent: the child neither
// removes their names nor writes their words; its imports go on being watched.
//
// Thread-safety: every function, from any thread. ExportedEvent is a cheap handle; copies
// share one export.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "eventide/device.hpp"
#include "eventide/event.hpp"

namespace eventide::ipc {

namespace detail {
class ExportOwner;
}

class ExportedEvent {
 public:
  // An empty handle (handle() is a StateError).
  ExportedEvent() noexcept = default;

  // The string another process passes to import_event: printable ASCII, no spaces
  // ("eventide-ipc:1:eventide.4242.1.9f3a0c1d").
  const std::string& handle() const;
  // The event that was exported.
  Event event() const;
  // Whether importers on a GPU of the exporter's kind wait on the GPU (a CUDA event's export).
  bool native() const noexcept;
  // Removes the block's name now (what dropping the last copy does); handle() stays readable.
  // Idempotent.
  void close() noexcept;
  explicit operator bool() const noexcept { return owner_ != nullptr; }

 private:
  friend ExportedEvent export_event(const Event& event);
  std::shared_ptr<detail::ExportOwner> owner_;
};

// Exports `event` (the work tied to it now). Never blocks. StateError for an EMPTY event (it
// would never finish) or after the runtime has shut down; Error if the shared memory cannot
// be made; DeviceError if the GPU's interprocess event cannot.
ExportedEvent export_event(const Event& event);

// An event that finishes when the exported one does (see above), on `device`: where streams
// will wait on it (a CUDA device: on the GPU, for a CUDA export). nullopt: the exporter's
// device where this process has it, else the CPU. InvalidArgument for a malformed handle, one
// whose block is gone (its exporter dropped it or exited), a block that is not eventide's or
// of another version, a device that is not available, a device of another kind than the
// exporter's GPU (other than the CPU, which uses the host path), or a GPU export imported on
// a GPU by the process that exported it (wait on the event itself). An exporter found dead
// gives an event that fails (not an exception). Never blocks on the exporter.
Event import_event(const std::string& handle, std::optional<Device> device = std::nullopt);

}  // namespace eventide::ipc
