// MPI: the process's world, and the transport of CPU tensors (mpi.hpp, transport.hpp).
#include "distributed/mpi.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>
#include <string>

#include "core/parker.hpp"
#include "core/work.hpp"
#include "eventide/errors.hpp"
#include "eventide/half.hpp"

namespace eventide::distributed::detail {

namespace {

[[noreturn]] void throw_mpi(const char* call, int status) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) length = 0;
  throw DeviceError(std::string(call) + " failed: " +
                        (length > 0 ? std::string(text, static_cast<std::size_t>(length))
                                    : "MPI error " + std::to_string(status)),
                    call, status);
}

void check(const char* call, int status) {
  if (status != MPI_SUCCESS) throw_mpi(call, status);
}

// A transfer that waits for the peers: on a CPU stream's worker, it lets the pool start
// another thread meanwhile (core/parker.hpp), as a runtime wait does.
template <class Call>
void blocking(const char* call, Call&& mpi_call) {
  int status;
  {
    eventide::detail::BlockingRegion region;
    status = mpi_call();
  }
  check(call, status);
}

// --- 16-bit floats: MPI has no type for them; a 2-byte type and ops of eventide's own. -----

template <std::uint16_t (*ToBits)(float), float (*FromBits)(std::uint16_t), int Op>
void reduce_16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = FromBits(a[i]);
    const float y = FromBits(b[i]);
    float r;
    if constexpr (Op == 0) r = x + y;
    if constexpr (Op == 1) r = x * y;
    if constexpr (Op == 2) r = (x != x || y != y) ? x + y : std::max(x, y);  // NaN wins
    if constexpr (Op == 3) r = (x != x || y != y) ? x + y : std::min(x, y);
    b[i] = ToBits(r);
  }
}

// The ops of one 16-bit type, in ReduceOp's order up to min (avg is a sum, then a division).
template <std::uint16_t (*ToBits)(float), float (*FromBits)(std::uint16_t)>
constexpr std::array<MPI_User_function*, 4> kReduce16 = {
    &reduce_16<ToBits, FromBits, 0>, &reduce_16<ToBits, FromBits, 1>,
    &reduce_16<ToBits, FromBits, 2>, &reduce_16<ToBits, FromBits, 3>};

std::size_t op_index(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return 0;
    case ReduceOp::prod: return 1;
    case ReduceOp::max: return 2;
    case ReduceOp::min: return 3;
  }
  return 0;
}

// Divides each of `count` elements by `by`, in place: avg's last step.
void divide(void* data, std::size_t count, DType dtype, int by) {
  switch (dtype) {
    case DType::f32: {
      auto* p = static_cast<float*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] /= static_cast<float>(by);
      break;
    }
    case DType::f64: {
      auto* p = static_cast<double*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] /= by;
      break;
    }
    case DType::f16: {
      auto* p = static_cast<std::uint16_t*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] = float_to_f16(f16_to_float(p[i]) / static_cast<float>(by));
      break;
    }
    case DType::bf16: {
      auto* p = static_cast<std::uint16_t*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / static_cast<float>(by));
      break;
    }
    case DType::i32:
    case DType::i64: break;  // refused before: avg is for floating dtypes
  }
}

int as_count(std::size_t count) {
  // (The communicator refuses larger tensors before they are enqueued: max_count.)
  return static_cast<int>(count);
}

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, int size) : comm_(comm), size_(size) {
    check("MPI_Type_contiguous", MPI_Type_contiguous(2, MPI_BYTE, &f16_));
    check("MPI_Type_commit", MPI_Type_commit(&f16_));
    check("MPI_Type_contiguous", MPI_Type_contiguous(2, MPI_BYTE, &bf16_));
    check("MPI_Type_commit", MPI_Type_commit(&bf16_));
    for (std::size_t i = 0; i < 4; ++i) {
      check("MPI_Op_create", MPI_Op_create(kReduce16<float_to_f16, f16_to_float>[i], 1, &f16_ops_[i]));
      check("MPI_Op_create", MPI_Op_create(kReduce16<float_to_bf16, bf16_to_float>[i], 1, &bf16_ops_[i]));
    }
  }

  void free() noexcept {
    for (MPI_Op& op : f16_ops_) MPI_Op_free(&op);
    for (MPI_Op& op : bf16_ops_) MPI_Op_free(&op);
    MPI_Type_free(&f16_);
    MPI_Type_free(&bf16_);
  }

  const char* name() const noexcept override { return "mpi"; }
  std::size_t max_count() const noexcept override { return INT_MAX; }

  std::string refuses(DType dtype, ReduceOp op) const override {
    if (op == ReduceOp::avg && !is_floating(dtype)) {
      return "avg needs a floating dtype, got " + std::string(eventide::name(dtype));
    }
    return {};
  }

  void all_reduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                  void*) override {
    agree(Call::all_reduce, count, dtype, static_cast<int>(op), -1);
    // Always in place: MPI wants MPI_IN_PLACE from every rank or from none, and a rank cannot
    // know how the others called; so `in` is first copied to `out` (as Open MPI's algorithms
    // copy the send buffer before they reduce).
    if (in != out && count > 0) std::memcpy(out, in, count * itemsize(dtype));
    blocking("MPI_Allreduce", [&] { return MPI_Allreduce(MPI_IN_PLACE, out, as_count(count), type(dtype), reduction(dtype, op), comm_); });
    if (op == ReduceOp::avg) divide(out, count, dtype, size_);
  }

  void all_gather(const void* in, void* out, std::size_t count, DType dtype, void*) override {
    agree(Call::all_gather, count, dtype, -1, -1);
    blocking("MPI_Allgather", [&] {
      return MPI_Allgather(in, as_count(count), type(dtype), out, as_count(count), type(dtype), comm_);
    });
  }

  void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                      void*) override {
    agree(Call::reduce_scatter, count, dtype, static_cast<int>(op), -1);
    blocking("MPI_Reduce_scatter_block", [&] {
      return MPI_Reduce_scatter_block(in, out, as_count(count), type(dtype), reduction(dtype, op), comm_);
    });
    if (op == ReduceOp::avg) divide(out, count, dtype, size_);
  }

  void broadcast(const void* in, void* out, std::size_t count, DType dtype, int root,
                 void*) override {
    agree(Call::broadcast, count, dtype, -1, root);
    int rank = 0;
    MPI_Comm_rank(comm_, &rank);
    if (rank == root && count > 0 && in != out) std::memcpy(out, in, count * itemsize(dtype));
    blocking("MPI_Bcast", [&] { return MPI_Bcast(out, as_count(count), type(dtype), root, comm_); });
  }

  void send(const void* in, std::size_t count, DType dtype, int dst, void*) override {
    // A header first, what the message holds: a recv of another dtype but the same byte size
    // would take the bytes for its own dtype's.
    const std::int64_t header[2] = {static_cast<std::int64_t>(dtype), static_cast<std::int64_t>(count)};
    blocking("MPI_Send", [&] { return MPI_Send(header, 2, MPI_INT64_T, dst, kHeaderTag, comm_); });
    blocking("MPI_Send", [&] { return MPI_Send(in, as_count(count), type(dtype), dst, kTag, comm_); });
  }

  void recv(void* out, std::size_t count, DType dtype, int src, void*) override {
    std::int64_t header[2] = {0, 0};
    blocking("MPI_Recv", [&] { return MPI_Recv(header, 2, MPI_INT64_T, src, kHeaderTag, comm_, MPI_STATUS_IGNORE); });
    if (header[0] != static_cast<std::int64_t>(dtype) || header[1] != static_cast<std::int64_t>(count)) {
      // The message is taken all the same (into scratch), so that the next one pairs right.
      MPI_Status probed{};
      blocking("MPI_Probe", [&] { return MPI_Probe(src, kTag, comm_, &probed); });
      int bytes = 0;
      check("MPI_Get_count", MPI_Get_count(&probed, MPI_BYTE, &bytes));
      std::vector<unsigned char> scratch(static_cast<std::size_t>(std::max(bytes, 1)));
      blocking("MPI_Recv", [&] {
        return MPI_Recv(scratch.data(), bytes, MPI_BYTE, src, kTag, comm_, MPI_STATUS_IGNORE);
      });
      const bool known = header[0] >= 0 && header[0] <= static_cast<std::int64_t>(DType::bf16);
      const bool same_dtype = header[0] == static_cast<std::int64_t>(dtype);
      const std::string theirs = known ? std::string(eventide::name(static_cast<DType>(header[0]))) : "?";
      throw InvalidArgument("recv: rank " + std::to_string(src) + " sent " + std::to_string(header[1]) + " elements" +
                            (same_dtype ? "" : " of " + theirs) + ", recv expected " + std::to_string(count) +
                            (same_dtype ? "" : " of " + std::string(eventide::name(dtype))) +
                            " (send's tensor and recv's shape and dtype must match)");
    }
    MPI_Status status{};
    blocking("MPI_Recv", [&] { return MPI_Recv(out, as_count(count), type(dtype), src, kTag, comm_, &status); });
    // A shorter message leaves the rest of `out` unwritten, and MPI does not call it an error.
    int got = 0;
    check("MPI_Get_count", MPI_Get_count(&status, type(dtype), &got));
    if (got != as_count(count)) {
      throw DeviceError("MPI_Recv: rank " + std::to_string(src) + " sent " +
                            (got == MPI_UNDEFINED ? std::string("a message of another size")
                                                  : std::to_string(got) + " elements") +
                            ", recv expected " + std::to_string(count) +
                            " (send's tensor and recv's shape and dtype must match)",
                        "MPI_Recv", MPI_ERR_COUNT);
    }
  }

  void barrier(void*) override {
    agree(Call::barrier, 0, DType::f32, -1, -1);
    blocking("MPI_Barrier", [&] { return MPI_Barrier(comm_); });
  }

 private:
  static constexpr int kTag = 0x65;        // eventide's point-to-point messages
  static constexpr int kHeaderTag = 0x67;  // ... and the header before each (send)
  // EVENTIDE_COLLECTIVE_CHECKS=0 leaves out agree() (every rank must set it alike).
  const bool checks_ = [] {
    const char* v = std::getenv("EVENTIDE_COLLECTIVE_CHECKS");
    return !(v && std::strcmp(v, "0") == 0);
  }();

  enum class Call : std::int64_t { all_reduce = 1, all_gather, reduce_scatter, broadcast, barrier };

  // Every rank's call agreed before any data moves: which collective, dtype, element count, op
  // and root. Mismatched calls crashed a rank (MPI read past the smaller buffer) or gave
  // garbage (float32 against int32); now every rank fails with the same error. One MPI_Allreduce
  // of ten integers (the fields and their negations, under MAX: the largest and the smallest
  // of each across the ranks).
  void agree(Call call, std::size_t count, DType dtype, int op, int root) {
    if (!checks_) return;
    const std::int64_t mine[5] = {static_cast<std::int64_t>(call), static_cast<std::int64_t>(dtype),
                                  static_cast<std::int64_t>(count), op, root};
    std::int64_t spread[10];
    for (int i = 0; i < 5; ++i) {
      spread[i] = mine[i];
      spread[5 + i] = -mine[i];
    }
    blocking("MPI_Allreduce", [&] { return MPI_Allreduce(MPI_IN_PLACE, spread, 10, MPI_INT64_T, MPI_MAX, comm_); });
    static constexpr const char* kField[5] = {"the collective", "the dtype", "the element count", "the op", "the root"};
    static constexpr const char* kCall[6] = {"?", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier"};
    for (int i = 0; i < 5; ++i) {
      const std::int64_t most = spread[i], least = -spread[5 + i];
      if (most == least) continue;
      auto shown = [&](std::int64_t v) -> std::string {
        if (i == 0 && v >= 1 && v <= 5) return kCall[v];
        if (i == 1 && v >= 0 && v <= static_cast<std::int64_t>(DType::bf16)) return std::string(eventide::name(static_cast<DType>(v)));
        if (i == 3 && v >= 0 && v <= static_cast<std::int64_t>(ReduceOp::avg)) return distributed::name(static_cast<ReduceOp>(v));
        return std::to_string(v);
      };
      throw InvalidArgument(std::string(kCall[static_cast<int>(call)]) + ": the ranks' calls do not match (" + kField[i] +
                            " differs: " + shown(least) + " on some rank, " + shown(most) +
                            " on another; this rank: " + shown(mine[i]) +
                            "); every rank must issue the same collectives, in the same order, with "
                            "the same dtype, element count, op and root");
    }
  }

  MPI_Datatype type(DType dtype) const noexcept {
    switch (dtype) {
      case DType::f32: return MPI_FLOAT;
      case DType::f64: return MPI_DOUBLE;
      case DType::i32: return MPI_INT32_T;
      case DType::i64: return MPI_INT64_T;
      case DType::f16: return f16_;
      case DType::bf16: return bf16_;
    }
    return MPI_BYTE;
  }

  MPI_Op reduction(DType dtype, ReduceOp op) const noexcept {
    if (dtype == DType::f16) return f16_ops_[op_index(op)];
    if (dtype == DType::bf16) return bf16_ops_[op_index(op)];
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return MPI_SUM;
      case ReduceOp::prod: return MPI_PROD;
      case ReduceOp::max: return MPI_MAX;
      case ReduceOp::min: return MPI_MIN;
    }
    return MPI_SUM;
  }

  MPI_Comm comm_;
  int size_;
  MPI_Datatype f16_ = MPI_DATATYPE_NULL;
  MPI_Datatype bf16_ = MPI_DATATYPE_NULL;
  std::array<MPI_Op, 4> f16_ops_{};
  std::array<MPI_Op, 4> bf16_ops_{};
};

class World final : public MpiWorld {
 public:
  World() {
    int initialized = 0;
    check("MPI_Initialized", MPI_Initialized(&initialized));
    int provided = 0;
    if (!initialized) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized) throw StateError("distributed::init: MPI has already been finalized in this process");
      check("MPI_Init_thread", MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      started_ = true;
    } else {
      check("MPI_Query_thread", MPI_Query_thread(&provided));
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      if (started_) MPI_Finalize();
      throw DeviceError("distributed::init: MPI gives thread level " + std::to_string(provided) +
                            "; eventide's collectives run on its stream threads and need "
                            "MPI_THREAD_SERIALIZED or more (start MPI with MPI_Init_thread)",
                        "MPI_Init_thread", provided);
    }
    check("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    // Errors come back as return codes (then DeviceErrors), instead of aborting the job.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check("MPI_Comm_rank", MPI_Comm_rank(comm_, &rank_));
    check("MPI_Comm_size", MPI_Comm_size(comm_, &size_));
    MPI_Comm local = MPI_COMM_NULL;
    check("MPI_Comm_split_type", MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    transport_ = std::make_unique<MpiTransport>(comm_, size_);
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int local_rank() const noexcept override { return local_rank_; }
  int local_size() const noexcept override { return local_size_; }
  Transport& transport() noexcept override { return *transport_; }

  void broadcast_bytes(void* data, std::size_t bytes, int root) override {
    check("MPI_Bcast", MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_));
  }

  std::int64_t measure_clock_offset() override {
    constexpr int kTries = 16;
    constexpr int kTag = 0x66;
    std::int64_t offset = 0;
    for (int peer = 1; peer < size_; ++peer) {
      for (int i = 0; i < kTries; ++i) {
        if (rank_ == 0) {
          std::int64_t ping = 0;
          check("MPI_Recv", MPI_Recv(&ping, 1, MPI_INT64_T, peer, kTag, comm_, MPI_STATUS_IGNORE));
          const std::int64_t now = eventide::detail::host_now_ns();
          check("MPI_Send", MPI_Send(&now, 1, MPI_INT64_T, peer, kTag, comm_));
        } else if (rank_ == peer) {
          const std::int64_t sent = eventide::detail::host_now_ns();
          check("MPI_Send", MPI_Send(&sent, 1, MPI_INT64_T, 0, kTag, comm_));
          std::int64_t theirs = 0;
          check("MPI_Recv", MPI_Recv(&theirs, 1, MPI_INT64_T, 0, kTag, comm_, MPI_STATUS_IGNORE));
          const std::int64_t back = eventide::detail::host_now_ns();
          if (back - sent < best_round_trip_) {
            best_round_trip_ = back - sent;
            offset = theirs - (sent + back) / 2;
          }
        }
      }
    }
    return offset;
  }

  void finish() noexcept override {
    // The program (or mpi4py) may have ended MPI already: no MPI call is allowed then, not even
    // a free.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    transport_->free();
    MPI_Comm_free(&comm_);
    if (started_) MPI_Finalize();
  }

  void abort_job(int code) noexcept override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Abort(MPI_COMM_WORLD, code);
  }

  bool all_agree(bool ok) override {
    int mine = ok ? 1 : 0, all = 0;
    check("MPI_Allreduce", MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm_));
    return all == 1;
  }

 private:
  bool started_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::int64_t best_round_trip_ = std::numeric_limits<std::int64_t>::max();
  std::unique_ptr<MpiTransport> transport_;
};

}  // namespace

std::unique_ptr<MpiWorld> MpiWorld::start() { return std::make_unique<World>(); }

bool launched_by_mpi_launcher() noexcept {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    const char* v = std::getenv(var);
    if (v && std::atoi(v) > 1) return true;
  }
  return false;
}

}  // namespace eventide::distributed::detail
