// Interprocess CUDA events (eventide/ipc.hpp's GPU path, core/backend.hpp's IpcNativeEvent):
// the exporter makes a CUDA event with cudaEventInterprocess | cudaEventDisableTiming and
// records it on the GPU after the exported work; the importer opens its handle
// (cudaIpcOpenEventHandle) and makes its streams wait for it with cudaStreamWaitEvent, on the
// GPU, with no host round trip. A never-recorded CUDA event counts as complete, so the core
// tells importers to use the handle only once the record has been enqueued.
//
// Lifetime: the event is destroyed (an opened one: closed) with the object, on any thread;
// destroying one that work still waits for is allowed by CUDA (the wait still ends).
#pragma once

#include <memory>
#include <span>

#include "core/backend.hpp"
#include "eventide/device.hpp"

namespace eventide::backends::cuda {

// A new interprocess event on `device`. DeviceError if CUDA cannot make it or its handle.
std::unique_ptr<detail::IpcNativeEvent> create_ipc_event(Device device);
// Opens another process's event on `device` from its handle bytes. InvalidArgument for a
// handle of the wrong size; DeviceError if CUDA refuses it (cudaIpcOpenEventHandle fails in
// the process that made the event, or where the two processes cannot share events).
std::unique_ptr<detail::IpcNativeEvent> open_ipc_event(Device device, std::span<const std::byte> handle);

}  // namespace eventide::backends::cuda
