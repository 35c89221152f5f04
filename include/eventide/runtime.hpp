// eventide/runtime.hpp: device-wide operations and runtime settings.
//
// The runtime starts on first use (devices discovered, no threads yet: each stream's worker
// and each device's callback thread start with their first work) and stops at process exit,
// after the work that is running has finished; work still queued then is dropped.
// Thread-safety: every function may be called from any thread.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string_view>

#include "eventide/device.hpp"

namespace eventide {

// Blocks until all work enqueued so far on every stream of `device` (of every device, for
// the first form) has finished (SyncPoint). Does not throw for failed ops: their events and
// tensors carry the errors; throws DeviceError if a device has failed as a whole (a GPU's
// sticky error).
//
// @code
//   ev::Tensor out = ev::matmul(a, b);
//   ev::synchronize();                   // every stream of every device
//   ev::synchronize(ev::Device::cpu());  // or only the CPU's streams
// @endcode
void synchronize();
void synchronize(Device device);
// Like synchronize(), up to `timeout`: true once that work has finished (then DeviceError if a
// device has failed), false on timeout. See SyncPoint (stream.hpp) to wait in steps for a
// fixed end.
//
// @code
//   if (!ev::synchronize_for(std::chrono::seconds(5)))
//     std::fprintf(stderr, "device work still running after 5 s\n");
// @endcode
[[nodiscard]] bool synchronize_for(std::chrono::nanoseconds timeout);
[[nodiscard]] bool synchronize_for(Device device, std::chrono::nanoseconds timeout);

// Gives the memory eventide keeps for reuse back to the system, on every device: the blocks
// of freed tensors that the CPU's cache of large blocks and each GPU's block cache and memory
// pool hold (as torch.cuda.empty_cache does). Memory of live tensors, and of tensors whose ops
// have not finished, is not touched. Returns the bytes given back from eventide's own caches
// (a GPU pool's trim is not counted).
//
// @code
//   ev::synchronize();                      // big's ops are done...
//   big = ev::Tensor();                     // ...and its last handle dropped
//   std::size_t freed = ev::empty_cache();  // bytes given back to the system
// @endcode
std::size_t empty_cache();

// Called, on the callback thread, with the exception a callback threw and a description of
// where it came from ("callback of <Event finished on cpu, 1 op>"). The default prints both
// to stderr. A handler that throws is itself reported to stderr. Pass nullptr to restore the
// default.
//
// @code
//   ev::set_callback_error_handler([](std::exception_ptr error, std::string_view where) {
//     try { std::rethrow_exception(error); }
//     catch (const std::exception& e) { std::cerr << where << ": " << e.what() << "\n"; }
//   });
// @endcode
using CallbackErrorHandler = std::function<void(std::exception_ptr error, std::string_view where)>;
void set_callback_error_handler(CallbackErrorHandler handler);

// Whether f32 matmul on GPUs may use TF32 tensor cores (10-bit mantissa products, f32
// accumulation: several times faster, less precise). Off by default, as in PyTorch; applies
// to matmuls enqueued after the call.
//
// @code
//   ev::set_allow_tf32(true);  // matmuls enqueued from now on may use TF32
//   bool on = ev::allow_tf32();
// @endcode
void set_allow_tf32(bool allow) noexcept;
bool allow_tf32() noexcept;

// "0.1.0".
std::string_view version() noexcept;

}  // namespace eventide
