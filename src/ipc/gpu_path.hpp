// The GPU path of an export (eventide/ipc.hpp): a CUDA event exported to, and waited for on,
// another process's GPU, with no host round trip.
//
// The exporter records a native interprocess event on the GPU after the exported work (an op
// on a stream of its own that waits for that work), and only then sets kGpuReady: a native
// event never recorded would read complete at once. The importer opens it and ties its event
// to a marker on an internal stream after a GPU-side wait for it.
//
// The users word: CUDA leaves undefined what an imported CUDA event does once its exporter
// has destroyed it, so the exporter keeps its native event until no importer may touch it.
// The word holds a count of importers that have opened (or are opening) the handle and a
// closing bit, one atomic word, so that "count is 0" and "no one may open from now on" are one
// step (a CAS 0 -> kClosing by the exporter):
// * an importer opens the handle only after raising the count with a CAS that sees no closing
//   bit, and only while the state is not final (a final word: the work is over, nothing to
//   wait for on the GPU; the imported event then finishes on the host verdict alone); it
//   lowers the count (and wakes the word) once its stream's wait has passed on the GPU and it
//   has closed its own handle;
// * the exporter, once the user has let go of the export and its callbacks have run,
//   destroys the native event only after that CAS succeeds; otherwise it defers the destroy
//   (the watcher thread retries when the word changes, and every ~100 ms). An importer that
//   died holding a count is never waited for: that one event is leaked.
// * an importer that finds the closing bit while the state is not final (the exporter's
//   runtime shut down before the work finished) fails its stream's wait, since the work
//   cannot be waited for on the GPU any more.
#pragma once

#include <memory>

#include "core/event_state.hpp"
#include "eventide/device.hpp"
#include "eventide/event.hpp"
#include "ipc/ends.hpp"

namespace eventide::ipc::detail {

// The importer's side of the users word: whether it may open the native event (and, if
// counted, that it must lower the count again: Import::drop_native).
NativeUse acquire_native_use(Block& b) noexcept;
// The exporter's side: destroys `r`'s native event if no importer uses it (and none may from
// now on): true if done.
bool try_destroy(Retired& r) noexcept;

// The exporter: records `state`'s native event on `device`'s GPU after the work `verdict` is
// tied to, then sets kGpuReady. If that work fails first, no record is made.
void record_native_after(const std::shared_ptr<ExportState>& state,
                         eventide::detail::EventState& verdict, Device device);

// The importer, on `target` (a GPU of the exporter's kind): an event that host waits, poll
// and callbacks finish with the verdict, and that streams wait for on the GPU: a marker on an
// internal stream after the gate, then a GPU-side wait for the exporter's native event.
Event import_on_gpu(const std::shared_ptr<Import>& imp, Device target);

}  // namespace eventide::ipc::detail
