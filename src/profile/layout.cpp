#include "profile/layout.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <fstream>
#include <system_error>

#include "eventide/errors.hpp"

namespace eventide::profile {

std::int64_t to_ns(double us) noexcept { return std::llround(us * 1000.0); }

std::string format_fixed(double value, int decimals) {
  // to_chars: printf and iostreams would follow the global locale ("1,25").
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::fixed, decimals);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

std::string short_stream_name(const StreamTrack& track) {
  const std::string prefix = track.device.str() + " ";
  if (track.stream.rfind(prefix, 0) == 0) return track.stream.substr(prefix.size());
  return track.stream;
}

std::string host_wait_label(const Profile& profile, const Layout& layout, const ProfiledHostWait& wait) {
  if (wait.event != 0) return "wait event " + std::to_string(wait.event);
  if (!wait.ops.empty()) {
    if (auto it = layout.index_of.find(wait.ops.front()); it != layout.index_of.end()) {
      const ProfiledOp& op = profile.ops()[it->second];
      return "wait for " + op.name + "#" + std::to_string(op.seq);
    }
  }
  return "wait";
}

void write_text_file(const std::string& path, const std::string& text, const char* what) {
  auto fail = [&](const char* doing) {
    throw Error(std::string(what) + ": cannot " + doing + " " + path + ": " +
                std::error_code(errno, std::generic_category()).message());
  };
  errno = 0;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("open");
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.close();
  if (!f) fail("write");
}

namespace {

// Each range at the depth of the ranges of its thread still open when it starts (ranges come
// in start order, an enclosing one first).
void lay_out_ranges(const Profile& profile, Layout& layout) {
  const auto& ranges = profile.ranges();
  layout.range_lane_of.resize(ranges.size());
  struct Thread {
    std::vector<std::int64_t> open_ends;  // the ends of its ranges open at the current start
    std::vector<std::size_t> lanes;       // lane index per depth
  };
  std::vector<std::string> order;
  std::unordered_map<std::string, Thread> threads;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const ProfiledRange& r = ranges[i];
    auto [it, added] = threads.try_emplace(r.thread);
    if (added) order.push_back(r.thread);
    Thread& t = it->second;
    const std::int64_t start = to_ns(r.start_us);
    while (!t.open_ends.empty() && t.open_ends.back() <= start) t.open_ends.pop_back();
    const std::size_t depth = t.open_ends.size();
    t.open_ends.push_back(std::max(start, to_ns(r.end_us)));
    if (depth == t.lanes.size()) {
      t.lanes.push_back(layout.range_lanes.size());
      layout.range_lanes.push_back(RangeLane{r.thread, static_cast<int>(depth), {}});
    }
    layout.range_lanes[t.lanes[depth]].ranges.push_back(i);
    layout.range_lane_of[i] = t.lanes[depth];
  }
  // Grouped by thread (in the order of their first range), then by depth.
  std::vector<std::size_t> sorted(layout.range_lanes.size());
  for (std::size_t i = 0; i < sorted.size(); ++i) sorted[i] = i;
  auto thread_rank = [&](const RangeLane& l) {
    return std::find(order.begin(), order.end(), l.thread) - order.begin();
  };
  std::stable_sort(sorted.begin(), sorted.end(), [&](std::size_t a, std::size_t b) {
    const RangeLane& x = layout.range_lanes[a];
    const RangeLane& y = layout.range_lanes[b];
    return thread_rank(x) != thread_rank(y) ? thread_rank(x) < thread_rank(y) : x.depth < y.depth;
  });
  std::vector<RangeLane> lanes;
  std::vector<std::size_t> new_index(sorted.size());
  for (std::size_t k = 0; k < sorted.size(); ++k) {
    new_index[sorted[k]] = k;
    lanes.push_back(std::move(layout.range_lanes[sorted[k]]));
  }
  layout.range_lanes = std::move(lanes);
  for (std::size_t& lane : layout.range_lane_of) lane = new_index[lane];
}

}  // namespace

Layout lay_out(const Profile& profile) {
  Layout layout;
  const auto& ops = profile.ops();
  layout.spans.resize(ops.size());

  std::unordered_map<std::string, std::size_t> track_of;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const ProfiledOp& op = ops[i];
    layout.index_of.emplace(op.id, i);
    if (std::find(layout.devices.begin(), layout.devices.end(), op.device) == layout.devices.end()) {
      layout.devices.push_back(op.device);
    }
    auto [it, added] = track_of.try_emplace(op.stream, layout.streams.size());
    if (added) layout.streams.push_back(StreamTrack{op.stream, op.device, {}});
    layout.streams[it->second].ops.push_back(i);
  }
  // The CPU first, then the GPUs by index; a device's streams keep their order.
  auto rank = [](Device d) { return d.is_cpu() ? -1 : d.index(); };
  std::stable_sort(layout.devices.begin(), layout.devices.end(),
                   [&](Device a, Device b) { return rank(a) < rank(b); });
  std::stable_sort(layout.streams.begin(), layout.streams.end(),
                   [&](const StreamTrack& a, const StreamTrack& b) { return rank(a.device) < rank(b.device); });

  // In enqueue order: what a wait waited for was enqueued before it, so it has its place
  // by then, and so has the op before it on its stream.
  std::unordered_map<std::string, std::int64_t> previous_end;  // per stream
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const ProfiledOp& op = ops[i];
    if (op.start_us && op.end_us) {
      layout.spans[i] = Span{to_ns(*op.start_us), std::max(to_ns(*op.start_us), to_ns(*op.end_us)), false};
    } else if (op.is_wait && op.finished) {
      std::optional<std::int64_t> waited_end;
      for (std::uint64_t id : op.waits_for) {
        const std::optional<Span>* s = layout.span_of_id(id);
        if (s && *s) waited_end = std::max(waited_end.value_or((*s)->end_ns), (*s)->end_ns);
      }
      auto before = previous_end.find(op.stream);
      if (before != previous_end.end() || waited_end) {
        const std::int64_t start = before != previous_end.end() ? before->second : *waited_end;
        layout.spans[i] = Span{start, std::max(start, waited_end.value_or(start)), true};
      }
    }
    if (layout.spans[i]) previous_end[op.stream] = layout.spans[i]->end_ns;
  }
  lay_out_ranges(profile, layout);
  return layout;
}

std::vector<Arrow> arrows(const Profile& profile, const Layout& layout) {
  std::vector<Arrow> out;
  auto from = [&layout](std::uint64_t id) -> std::optional<std::size_t> {
    auto it = layout.index_of.find(id);
    if (it == layout.index_of.end()) return std::nullopt;
    return it->second;
  };
  auto end_of = [&layout](std::size_t op) -> std::optional<std::int64_t> {
    const std::optional<Span>& s = layout.spans[op];
    return s ? std::optional<std::int64_t>(s->end_ns) : std::nullopt;
  };
  // Marks the arrows out[first...] into one target: held back by those that ended last, if
  // later than `before` (the end of the op before the target on its stream, if any).
  auto mark_held = [&](std::size_t first, std::optional<std::int64_t> before) {
    std::optional<std::int64_t> last;
    for (std::size_t k = first; k < out.size(); ++k) {
      if (auto e = end_of(out[k].from)) last = std::max(last.value_or(*e), *e);
    }
    if (!last || (before && *last <= *before)) return;
    for (std::size_t k = first; k < out.size(); ++k) out[k].held_back = end_of(out[k].from) == last;
  };

  const auto& ops = profile.ops();
  std::vector<std::optional<std::int64_t>> end_before(ops.size());  // of the op before, per op
  for (const StreamTrack& track : layout.streams) {
    std::optional<std::int64_t> previous;
    for (std::size_t i : track.ops) {
      end_before[i] = previous;
      if (auto e = end_of(i)) previous = e;
    }
  }
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const std::size_t first = out.size();
    for (std::uint64_t id : ops[i].waits_for) {
      if (auto f = from(id)) out.push_back(Arrow{*f, Arrow::To::op, i, ops[i].is_wait});
    }
    mark_held(first, end_before[i]);
  }
  const auto& waits = profile.host_waits();
  for (std::size_t h = 0; h < waits.size(); ++h) {
    if (!waits[h].finished) continue;
    const std::size_t first = out.size();
    for (std::uint64_t id : waits[h].ops) {
      if (auto f = from(id)) out.push_back(Arrow{*f, Arrow::To::host_wait, h, true});
    }
    mark_held(first, std::nullopt);
  }
  const auto& callbacks = profile.callbacks();
  for (std::size_t c = 0; c < callbacks.size(); ++c) {
    const ProfiledRecord* last = nullptr;
    for (const ProfiledRecord& r : profile.records()) {
      if (r.event == callbacks[c].event && r.op != 0 && r.at_us <= callbacks[c].start_us) last = &r;
    }
    if (!last) continue;
    const std::size_t first = out.size();
    if (auto f = from(last->op)) out.push_back(Arrow{*f, Arrow::To::callback, c, false});
    mark_held(first, std::nullopt);
  }
  return out;
}

}  // namespace eventide::profile
