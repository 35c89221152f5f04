// tools/measure/cuda_measure.hpp: eventide on a GPU beside the raw CUDA calls it replaces,
// measured in the same process: the host cost of events, how fast the host notices the end of
// GPU work, how accurate op times are, and matmul throughput against cuBLASLt called directly
// on the same memory. Built only with the CUDA backend (EVENTIDE_WITH_CUDA).
//
// Every function needs an available CUDA device, blocks until its measurement is done, and
// throws std::runtime_error naming the CUDA call that failed (with its status); it leaves no
// CUDA object behind, also when it throws. Times are nanoseconds.
#pragma once

#include <chrono>
#include <vector>

#include <eventide/eventide.hpp>

namespace eventide::bench::cuda {

// Samples (ns) of eventide's call and of its CUDA counterparts, same process, same run.
struct Compared {
  std::vector<double> ours;
  std::vector<double> anchor;   // the CUDA call eventide's is read against
  std::vector<double> anchor2;  // a second reference, where there is one (else empty)
};

// The launch path (issue 12): a chain of `add`s of 256 floats, each reading the last one's
// output, enqueued back to back and drained, per op / the same add kernel launched raw with
// <<<>>> into preallocated buffers, drained the same way. Timing as the process has it
// (EVENTIDE_CUDA_TIMING).
Compared add_chain(Device gpu, int batches);

// poll() of a finished event / cudaEventQuery of a completed event; per call.
Compared poll(Device gpu, int batches);
// Event() + record(tensor), timing on / cudaEventRecord with timing on; anchor2: timing off.
Compared record(Device gpu, int batches);
// Event() + record(stream): a marker in the native stream, timing on / cudaEventRecord with
// timing on; anchor2: timing off.
Compared marker(Device gpu, int batches);
// The same region (a ~100 µs kernel on an idle stream) read by two markers and by a CUDA event
// pair, each event recorded just after its marker: ours, the markers' elapsed_time; anchor,
// cudaEventElapsedTime; anchor2, the kernel's own duration (%globaltimer).
Compared marker_region(Device gpu, int rounds);
// Stream::wait(event) on a finished event / cudaStreamWaitEvent; enqueue cost.
Compared stream_wait(Device gpu, int batches);

// A kernel holds until the host sets a gate in pinned memory; from setting it to the host
// noticing the end of the kernel: Event::wait / cudaEventSynchronize; anchor2: the floor (the
// host polls a word the kernel writes). With `busy`, the gate opens that long after the wait
// began (a helper thread opens it): the waiter has gone to sleep, as behind long GPU work.
Compared completion_wait(Device gpu, int rounds,
                         std::chrono::nanoseconds busy = std::chrono::nanoseconds(0));
// The same, noticed by a completion callback / cudaLaunchHostFunc.
Compared completion_callback(Device gpu, int rounds);

// A host-opened gate, a tiny op behind it, its end noticed by Event::wait (gate_op_wait) or a
// callback (gate_op_callback): from opening the gate to the notice. Ours: a UserEvent that
// the stream waits for; anchor: cuStreamWaitValue32 on a pinned word, then
// cudaEventSynchronize / cudaLaunchHostFunc.
Compared gate_op_wait(Device gpu, int rounds);
Compared gate_op_callback(Device gpu, int rounds);

// |time_elapsed - the kernel's own %globaltimer duration| for a ~10 µs kernel / the same error
// for a CUDA event pair around the kernel; anchor2: the kernel's own durations.
Compared timing_error(Device gpu, int rounds);

// Cross-device stream waits (issue 14): a ping-pong of `pingpongs` round trips between a
// stream of `a` and one of `b`, each side a tiny kernel that the other side's stream waits
// for, all held behind a GPU-side gate until enqueued. Per one-way wait (the chain's time /
// 2 * pingpongs, GPU time of `a` from the gate's opening to the chain's end): ours, eventide
// streams and events (Stream::wait on the other device's op, elapsed_time between markers);
// anchor, cudaEventRecord + cudaStreamWaitEvent on raw streams, timed by a CUDA event pair.
// Both devices must be available and different (std::invalid_argument otherwise).
Compared cross_device_wait(Device a, Device b, int rounds, int pingpongs);

// matmul + record + wait / cublasLtMatmul called directly (same heuristic, same memory),
// alternating trials, best trial of each, in TFLOP/s.
struct MatmulResult {
  double ours_tflops = 0;
  double direct_tflops = 0;
};
MatmulResult matmul(Device gpu, DType dtype, bool tf32, int n, int trials);

// Graphs (issue 29; cuda_graph_measure.cpp). A chain of `chain` tiny adds (x += y, 256
// floats) captured once, per op of a replay waited for: ours, Graph::replay of an eventide
// capture + wait; anchor, the same add kernels captured in a raw CUDA graph, cudaGraphLaunch +
// cudaStreamSynchronize; anchor2, the same chain issued eagerly through eventide and waited
// for alike. Rounds alternate between the three.
Compared graph_chain(Device gpu, int rounds, int chain);
// A graph of one tiny add: Graph::replay + wait / cudaGraphLaunch + cudaStreamSynchronize,
// per round trip.
Compared graph_round_trip(Device gpu, int rounds);
// `count` bf16 matmuls of n x n in one graph, replayed and waited for: TFLOP/s of eventide's
// capture / of cublasLtMatmul called directly in a raw CUDA graph; best of alternating trials.
MatmulResult graph_matmul(Device gpu, int n, int count, int trials);

}  // namespace eventide::bench::cuda
