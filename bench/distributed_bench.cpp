// eventide's collectives beside the library calls they make, in the same run, under mpirun:
//
//   mpirun -np 2 eventide_bench_distributed [--quick] [--cpu-only]
//
//  * GPU (where eventide has NCCL and each rank a GPU): all_reduce of 1 MiB to 1 GiB (f32)
//    through eventide (comm.all_reduce on an eventide stream) against ncclAllReduce called
//    directly on a communicator of the benchmark's own, over the same GPUs; bus bandwidth as
//    nccl-tests defines it (algorithm bandwidth * 2 (n - 1) / n). Then the latency of a small
//    all_reduce (8 bytes), back to back.
//  * CPU: all_reduce of CPU tensors (MPI, on the stream's worker) against MPI_Allreduce
//    called directly on the main thread, 4 bytes to 16 MiB: into one output tensor (the direct
//    call's pattern), a new tensor each, and one at a time (issue, then wait).
//  (The GPU table also gives eventide into one output tensor, as ncclAllReduce writes one.)
// Each figure is the time of `iters` back-to-back collectives, from a barrier to the end of
// the last (both sides alike: the host clock), the best of 3 rounds. Rank 0 prints Markdown
// tables: figure | eventide | direct | ratio.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <eventide/eventide.hpp>

#if EVENTIDE_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace ev = eventide;
namespace dist = eventide::distributed;
using Clock = std::chrono::steady_clock;

namespace {

int g_rank = 0;
int g_size = 1;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The best of `rounds` timings of `iters` runs of `issue`, each round ended by `finish`,
// started together on every rank.
template <class Issue, class Finish>
double best_time(int rounds, int iters, Issue&& issue, Finish&& finish) {
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) issue();
    finish();
    double t = seconds_since(t0);
    // The slowest rank's time is the collective's.
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::min(best, t);
  }
  return best / iters;
}

std::string size_text(std::size_t bytes) {
  if (bytes >= (1u << 30)) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

double bus_bandwidth_gbs(std::size_t bytes, double seconds) {
  // (One rank moves nothing between ranks: its algorithm bandwidth, then.)
  return bytes / seconds / 1e9 * (g_size > 1 ? 2.0 * (g_size - 1) / g_size : 1.0);
}

int iterations_for(std::size_t bytes, bool quick) {
  const std::size_t budget = quick ? (std::size_t{1} << 30) : (std::size_t{8} << 30);
  return static_cast<int>(std::clamp<std::size_t>(budget / std::max<std::size_t>(bytes, 1), 5, quick ? 200 : 2000));
}

void cpu_section(dist::Communicator& comm, bool quick) {
  MPI_Comm direct;
  MPI_Comm_dup(MPI_COMM_WORLD, &direct);
  if (g_rank == 0) {
    std::printf("\n## all_reduce of CPU tensors (MPI), %d ranks (us per collective)\n\n", g_size);
    std::printf("| size | eventide, into one out | MPI_Allreduce | ratio | eventide, a new tensor each "
                "| eventide, issue then wait each |\n|---|---|---|---|---|---|\n");
  }
  for (std::size_t bytes : {std::size_t{4}, std::size_t{1} << 10, std::size_t{1} << 20, std::size_t{16} << 20}) {
    const std::int64_t n = static_cast<std::int64_t>(bytes / 4);
    const int iters = std::min(iterations_for(bytes, quick), quick ? 100 : 1000);
    ev::Tensor in = ev::ones({n}, ev::DType::f32, ev::Device::cpu());
    ev::Tensor into = ev::zeros({n}, ev::DType::f32, ev::Device::cpu());
    into.wait();
    // Like the direct call: every collective into one buffer.
    const double ours = best_time(3, iters, [&] { comm.all_reduce(in, dist::ReduceOp::sum, into); },
                                  [&] { into.wait(); });
    // A new tensor each: issued far ahead, each holds its own fresh memory until it is done.
    ev::Tensor out;
    const double fresh = best_time(3, iters, [&] { out = comm.all_reduce(in); }, [&] { out.wait(); });
    out = ev::Tensor();
    const double one = best_time(3, std::max(iters / 4, 5), [&] { comm.all_reduce(in).wait(); }, [] {});
    std::vector<float> a(static_cast<std::size_t>(n), 1.0f), b(static_cast<std::size_t>(n));
    const double theirs = best_time(3, iters, [&] {
      MPI_Allreduce(a.data(), b.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, direct);
    }, [] {});
    if (g_rank == 0) {
      std::printf("| %s | %.2f | %.2f | %.2fx | %.2f | %.2f |\n", size_text(bytes).c_str(), ours * 1e6,
                  theirs * 1e6, ours / theirs, fresh * 1e6, one * 1e6);
    }
  }
  MPI_Comm_free(&direct);
}

#if EVENTIDE_WITH_NCCL
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}
void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, ncclGetErrorString(r));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void gpu_section(dist::Communicator& comm, bool quick) {
  const ev::Device dev = comm.device();
  check_cuda(cudaSetDevice(dev.index()), "cudaSetDevice");
  ncclUniqueId id;
  if (g_rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t direct;
  check_nccl(ncclCommInitRank(&direct, g_size, id, g_rank), "ncclCommInitRank");
  cudaStream_t raw;
  check_cuda(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), "cudaStreamCreate");
  ev::Stream stream(dev);
  ev::StreamGuard guard(stream);

  if (g_rank == 0) {
    std::printf("\n## all_reduce of GPU tensors (NCCL), %d ranks on %s..: bus bandwidth\n\n", g_size, dev.str().c_str());
    std::printf("| size | eventide (GB/s) | ncclAllReduce (GB/s) | eventide / direct | eventide into one out (GB/s) "
                "| into / direct |\n|---|---|---|---|---|---|\n");
  }
  const std::size_t top = quick ? (std::size_t{256} << 20) : (std::size_t{1} << 30);
  for (std::size_t bytes = std::size_t{1} << 20; bytes <= top; bytes *= 4) {
    const std::int64_t n = static_cast<std::int64_t>(bytes / 4);
    const int iters = iterations_for(bytes, quick);
    ev::Tensor in = ev::ones({n}, ev::DType::f32, dev);
    in.wait();
    ev::Tensor out;
    // Warm both paths (NCCL connects at the first collective of each communicator).
    comm.all_reduce(in).wait();
    void* buf_in = in.data_ptr();
    void* buf_out = nullptr;
    check_cuda(cudaMalloc(&buf_out, bytes), "cudaMalloc");
    check_nccl(ncclAllReduce(buf_in, buf_out, n, ncclFloat32, ncclSum, direct, raw), "ncclAllReduce");
    check_cuda(cudaStreamSynchronize(raw), "cudaStreamSynchronize");
    const double ours = best_time(3, iters, [&] { out = comm.all_reduce(in); }, [&] { out.wait(); });
    out = ev::Tensor();
    ev::Tensor into = ev::zeros({n}, ev::DType::f32, dev);
    const double ours_into = best_time(3, iters, [&] { comm.all_reduce(in, dist::ReduceOp::sum, into); },
                                       [&] { into.wait(); });
    into = ev::Tensor();
    const double theirs = best_time(3, iters, [&] {
      ncclAllReduce(buf_in, buf_out, n, ncclFloat32, ncclSum, direct, raw);
    }, [&] { check_cuda(cudaStreamSynchronize(raw), "cudaStreamSynchronize"); });
    check_cuda(cudaFree(buf_out), "cudaFree");
    if (g_rank == 0) {
      const double a = bus_bandwidth_gbs(bytes, ours), b = bus_bandwidth_gbs(bytes, theirs);
      const double c = bus_bandwidth_gbs(bytes, ours_into);
      std::printf("| %s | %.1f | %.1f | %.1f%% | %.1f | %.1f%% |\n", size_text(bytes).c_str(), a, b, 100.0 * a / b,
                  c, 100.0 * c / b);
    }
  }

  // Small all_reduce: latency per collective, back to back.
  {
    ev::Tensor in = ev::ones({2}, ev::DType::f32, dev);
    in.wait();
    void* buf_out = nullptr;
    check_cuda(cudaMalloc(&buf_out, 8), "cudaMalloc");
    const int iters = quick ? 200 : 2000;
    ev::Tensor out;
    const double ours = best_time(3, iters, [&] { out = comm.all_reduce(in); }, [&] { out.wait(); });
    ev::Tensor into = ev::zeros({2}, ev::DType::f32, dev);
    const double ours_into = best_time(3, iters, [&] { comm.all_reduce(in, dist::ReduceOp::sum, into); },
                                       [&] { into.wait(); });
    const double theirs = best_time(3, iters, [&] {
      ncclAllReduce(in.data_ptr(), buf_out, 2, ncclFloat32, ncclSum, direct, raw);
    }, [&] { check_cuda(cudaStreamSynchronize(raw), "cudaStreamSynchronize"); });
    // One at a time: issue, then wait for it (what a training step's small all_reduce costs).
    const double ours_one = best_time(3, iters / 4, [&] { comm.all_reduce(in).wait(); }, [] {});
    const double theirs_one = best_time(3, iters / 4, [&] {
      ncclAllReduce(in.data_ptr(), buf_out, 2, ncclFloat32, ncclSum, direct, raw);
      cudaStreamSynchronize(raw);
    }, [] {});
    check_cuda(cudaFree(buf_out), "cudaFree");
    if (g_rank == 0) {
      std::printf("\n| small all_reduce (8 B) | eventide (us) | ncclAllReduce (us) | ratio |\n|---|---|---|---|\n");
      std::printf("| back to back, per op | %.2f | %.2f | %.2fx |\n", ours * 1e6, theirs * 1e6, ours / theirs);
      std::printf("| back to back, into one out | %.2f | %.2f | %.2fx |\n", ours_into * 1e6, theirs * 1e6,
                  ours_into / theirs);
      std::printf("| issue then wait, each | %.2f | %.2f | %.2fx |\n", ours_one * 1e6, theirs_one * 1e6, ours_one / theirs_one);
    }
  }
  ncclCommDestroy(direct);
  cudaStreamDestroy(raw);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, cpu_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--cpu-only") == 0) {
      cpu_only = true;
    } else {
      std::fprintf(stderr, "usage: mpirun -np N %s [--quick] [--cpu-only]\n", argv[0]);
      return 2;
    }
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);  // eventide's init finds it started
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  dist::InitOptions options;
  if (cpu_only) options.device = ev::Device::cpu();
  dist::Communicator comm = dist::init(options);
  if (g_rank == 0) std::printf("# eventide_bench_distributed: %s\n", comm.str().c_str());
#if EVENTIDE_WITH_NCCL
  if (!comm.device().is_cpu()) gpu_section(comm, quick);
#endif
  cpu_section(comm, quick);
  dist::finalize();
  MPI_Finalize();
  return 0;
}
