// What both pictures of a Profile (the Chrome trace, the timeline page) draw: the devices, a
// track per stream with its ops in order, and where each op sits in time.
//
// Placement: an op with times sits at its times. A wait without times of its own (a GPU's:
// the GPU waits, nothing is timed) is placed where the times around it say it was: from the
// end of the op before it on its stream to the end of the last op it waited for (it could
// not end sooner, and on a GPU it ends then). Such a placement is marked `inferred`. Other
// ops without times (unfinished, or GPU ops under EVENTIDE_CUDA_TIMING=off) have no place.
//
// Times here are integer nanoseconds from the profile's start, so that the exporters can
// place things strictly inside one another without rounding surprises.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "eventide/profiler.hpp"

namespace eventide::profile {

struct Span {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  bool inferred = false;
};

struct StreamTrack {
  std::string stream;            // "cpu stream 3"
  Device device;
  std::vector<std::size_t> ops;  // indices into Profile::ops(), in enqueue order
};

// The user ranges (Profile::ranges()) of one thread at one nesting depth: a lane where none
// overlaps another. Depth 0 holds the ranges no other range of the thread encloses; a range
// that overlaps without being enclosed (closed out of order) goes one deeper all the same.
struct RangeLane {
  std::string thread;               // "thread 1"
  int depth = 0;
  std::vector<std::size_t> ranges;  // indices into Profile::ranges(), in start order
};

struct Layout {
  std::vector<Device> devices;      // in the order of their first op, the CPU first
  std::vector<StreamTrack> streams; // grouped by device, each device's in order of first op
  std::vector<std::optional<Span>> spans;  // per op index
  std::unordered_map<std::uint64_t, std::size_t> index_of;  // op id -> op index
  // By thread in the order of their first range, each thread's by depth.
  std::vector<RangeLane> range_lanes;
  std::vector<std::size_t> range_lane_of;  // per range index: its lane in range_lanes

  const std::optional<Span>* span_of_id(std::uint64_t id) const {
    auto it = index_of.find(id);
    return it == index_of.end() ? nullptr : &spans[it->second];
  }
};

Layout lay_out(const Profile& profile);

// An arrow of both pictures, from the end of an op to what waited for it.
struct Arrow {
  enum class To { op, host_wait, callback };
  std::size_t from = 0;   // index into Profile::ops()
  To to = To::op;
  std::size_t index = 0;  // into ops(), host_waits() or callbacks(), as `to` says
  bool at_end = false;    // it enters its target at the end (a wait: when it was satisfied)
  // Its op is what held the target back: of everything the target had to wait for (the ops
  // its arrows come from and, for an op, the op before it on its stream) it ended last. An
  // op reading inputs made long before, behind other work on its own stream, has arrows from
  // them that held nothing back: the timeline page leaves those out until asked (then draws
  // them faintly, under the bars), so that the dependencies of setup work (the inputs'
  // randn) do not hide what each op really waited for.
  bool held_back = false;
};

// The arrows, in this order: to each op (a wait, or an op reading a tensor of another stream)
// from the ops it waited for; to each host wait that saw its ops end (one that timed out saw
// nothing end: no arrow, it would point back in time); to each callback from the op of its
// event's last record before it ran. Only ops of the profile; a picture skips the ops it
// does not place. `held_back` is decided on the layout's places: an arrow from an op without
// a place holds nothing back, and one whose target has no place is never drawn.
std::vector<Arrow> arrows(const Profile& profile, const Layout& layout);

// Microseconds to the layout's nanoseconds (rounded).
std::int64_t to_ns(double us) noexcept;

// "stream 3" out of "cpu stream 3" (the stream's name without its device).
std::string short_stream_name(const StreamTrack& track);

// "wait event 2", "wait for matmul#4" (a tensor's or a stream's wait), "wait".
std::string host_wait_label(const Profile& profile, const Layout& layout, const ProfiledHostWait& wait);

// `value` with `decimals` digits after the point, whatever the global locale ("1.25", never
// "1,25"): for every number a profile shows as text.
std::string format_fixed(double value, int decimals);

// Writes `text` to `path`; Error naming `what` (the caller), the path and the reason if it
// cannot.
void write_text_file(const std::string& path, const std::string& text, const char* what);

}  // namespace eventide::profile
