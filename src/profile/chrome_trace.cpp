// Profile::chrome_trace: the Trace Event Format (the JSON that Perfetto and chrome://tracing
// load; "Trace Event Format", Google, 2016).
//
//   pid 1..N    a process per device ("cpu", "cuda:0"), a thread (track) per stream; ops
//               are complete events ("X"), waits too (category "wait"); an event record is an
//               instant mark ("i") where its op ends; an op that had not finished is an
//               instant mark at the end of the profile.
//   pid N+1     "host": a track per thread that waited ("host waits · thread 1"),
//               per callback thread ("callbacks cpu"), and per thread that opened user
//               ranges ("ranges · thread 1": complete events of category "range", nested as
//               they were; no arrow binds to them, so they keep their exact times).
//   arrows      flow events ("s" then "f", one id each) from an op to what waited for it: a
//               wait or an op on another stream, a host wait that saw it end (not one that
//               timed out), a callback of an event it was recorded on.
//
// Flow events bind to slices by time: each viewer looks for the slice of that track open
// at the flow's timestamp, a half-open [start, end). So every slice here lasts at least
// kMinSliceNs and starts no earlier than the previous one on its track ends (a zero-length
// slice encloses nothing), and each flow point sits strictly inside its slice: a start one
// nanosecond before its op's end, a finish one nanosecond after its op's start (or before the
// end of a wait: the moment it was satisfied).
#include <map>
#include <memory>

#include <unistd.h>

#include "eventide/runtime.hpp"
#include "profile/json.hpp"
#include "profile/layout.hpp"

namespace eventide {

namespace {

using profile::Json;
using profile::Layout;

constexpr std::int64_t kMinSliceNs = 2;

double us(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// The machine's name, for a label that does not give one; empty if it has none.
std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

struct Slice {
  std::int64_t start_ns = 0, end_ns = 0;
  Json event;  // pid, tid, name, cat, args: ts and dur are set last
};

struct Track {
  int pid = 0, tid = 0;
  std::string name;
  int sort_index = 0;
  std::vector<Slice> slices;
  std::int64_t last_end = 0;

  // Adds a slice, moved after the previous one and made long enough to hold a flow point
  // (see the header); returns its index.
  std::size_t add(std::int64_t start, std::int64_t end, Json event) {
    if (!slices.empty()) start = std::max(start, last_end);
    end = std::max(end, start + kMinSliceNs);
    last_end = end;
    slices.push_back(Slice{start, end, std::move(event)});
    return slices.size() - 1;
  }
};

struct SliceRef {
  Track* track = nullptr;
  std::size_t index = 0;
  const Slice& slice() const { return track->slices[index]; }
};

class TraceWriter {
 public:
  explicit TraceWriter(const Profile& p) : p_(p), layout_(profile::lay_out(p)) {}

  std::string write() {
    add_ops();
    add_host();
    add_flows();
    return serialize();
  }

 private:
  Track& new_track(int pid, int tid, std::string name) {
    tracks_.push_back(std::make_unique<Track>());
    Track& t = *tracks_.back();
    t.pid = pid;
    t.tid = tid;
    t.name = std::move(name);
    t.sort_index = tid;
    return t;
  }

  void add_ops() {
    const auto& ops = p_.ops();
    op_slices_.resize(ops.size());
    for (std::size_t d = 0; d < layout_.devices.size(); ++d) {
      processes_.emplace_back(static_cast<int>(d) + 1, layout_.devices[d].str());
    }
    std::map<int, int> next_tid;
    for (const profile::StreamTrack& st : layout_.streams) {
      const int pid = pid_of(st.device);
      Track& track = new_track(pid, ++next_tid[pid], st.stream);
      Track* nodes = nullptr;  // the parts of its graph replays, on a track under it
      for (std::size_t i : st.ops) {
        const ProfiledOp& op = ops[i];
        const auto& span = layout_.spans[i];
        for (const ProfiledPart& part : op.parts) {
          if (!nodes) nodes = &new_track(pid, ++next_tid[pid], st.stream + " · graph nodes");
          nodes->add(profile::to_ns(part.start_us), profile::to_ns(part.end_us),
                     Json::object({{"ph", "X"},
                                   {"pid", pid},
                                   {"tid", nodes->tid},
                                   {"name", part.name},
                                   {"cat", "graph node"},
                                   {"args", Json::object({{"replay", op.id}})}}));
        }
        if (!span) {
          if (!op.finished) {
            unfinished_.push_back(Json::object({{"ph", "i"},
                                                {"s", "t"},
                                                {"pid", pid},
                                                {"tid", track.tid},
                                                {"name", op.name + " (not finished)"},
                                                {"cat", "unfinished"},
                                                {"ts", p_.duration_us()},
                                                {"args", op_args(op)}}));
          }
          continue;
        }
        Json args = op_args(op);
        if (span->inferred) args["inferred"] = true;
        Json ev = Json::object({{"ph", "X"},
                                {"pid", pid},
                                {"tid", track.tid},
                                {"name", op.name},
                                {"cat", op.is_wait ? "wait" : "op"},
                                {"args", std::move(args)}});
        op_slices_[i] = SliceRef{&track, track.add(span->start_ns, span->end_ns, std::move(ev))};
      }
    }
  }

  Json op_args(const ProfiledOp& op) const {
    Json args = Json::object({{"id", op.id}, {"seq", op.seq}, {"stream", op.stream}});
    if (!op.detail.empty()) args["detail"] = op.detail;
    if (!op.error.empty()) args["error"] = op.error;
    if (!op.finished) args["finished"] = false;
    if (!op.waits_for.empty()) args["waits_for"] = op.waits_for;
    return args;
  }

  void add_host() {
    if (p_.host_waits().empty() && p_.callbacks().empty() && p_.ranges().empty()) return;
    host_pid_ = static_cast<int>(layout_.devices.size()) + 1;
    processes_.emplace_back(host_pid_, "host");
    int tid = 0;
    std::map<std::string, Track*> by_name;
    auto track_for = [&](const std::string& name) -> Track& {
      auto [it, added] = by_name.try_emplace(name, nullptr);
      if (added) it->second = &new_track(host_pid_, ++tid, name);
      return *it->second;
    };
    for (const ProfiledHostWait& h : p_.host_waits()) {
      Track& track = track_for("host waits · " + h.thread);
      Json args = Json::object({{"thread", h.thread}});
      if (h.event) args["event"] = h.event;
      if (!h.finished) args["timed_out"] = true;
      if (!h.ops.empty()) args["ops"] = h.ops;
      Json ev = Json::object({{"ph", "X"},
                              {"pid", host_pid_},
                              {"tid", track.tid},
                              {"cat", "host_wait"},
                              {"name", profile::host_wait_label(p_, layout_, h)},
                              {"args", std::move(args)}});
      host_wait_slices_.push_back(
          SliceRef{&track, track.add(profile::to_ns(h.start_us), profile::to_ns(h.end_us), std::move(ev))});
    }
    for (const ProfiledCallback& c : p_.callbacks()) {
      Track& track = track_for(c.thread);
      Json ev = Json::object({{"ph", "X"},
                              {"pid", host_pid_},
                              {"tid", track.tid},
                              {"cat", "callback"},
                              {"name", c.event ? "callback of event " + std::to_string(c.event)
                                               : std::string("callback")},
                              {"args", Json::object({{"event", c.event}})}});
      callback_slices_.push_back(
          SliceRef{&track, track.add(profile::to_ns(c.start_us), profile::to_ns(c.end_us), std::move(ev))});
    }
    for (const ProfiledRange& r : p_.ranges()) {
      Track& track = track_for("ranges · " + r.thread);
      Json ev = Json::object({{"ph", "X"},
                              {"pid", host_pid_},
                              {"tid", track.tid},
                              {"cat", "range"},
                              {"name", r.name},
                              {"args", Json::object({{"thread", r.thread}})}});
      // Not Track::add: ranges nest, and a slice of its own would be moved after the last.
      const std::int64_t start = profile::to_ns(r.start_us);
      track.slices.push_back(Slice{start, std::max(start, profile::to_ns(r.end_us)), std::move(ev)});
    }
  }

  const SliceRef* op_slice(std::uint64_t id) const {
    auto it = layout_.index_of.find(id);
    if (it == layout_.index_of.end() || !op_slices_[it->second].track) return nullptr;
    return &op_slices_[it->second];
  }

  // An arrow from `from` (its end) to `to` (its start, or its end for a wait).
  void flow(const SliceRef& from, const SliceRef& to, bool at_end, const char* name) {
    const std::uint64_t id = ++flow_ids_;
    const Slice& a = from.slice();
    const Slice& b = to.slice();
    flows_.push_back(Json::object({{"ph", "s"},
                                   {"id", id},
                                   {"cat", "flow"},
                                   {"name", name},
                                   {"bp", "e"},
                                   {"pid", from.track->pid},
                                   {"tid", from.track->tid},
                                   {"ts", us(a.end_ns - 1)}}));
    flows_.push_back(Json::object({{"ph", "f"},
                                   {"id", id},
                                   {"cat", "flow"},
                                   {"name", name},
                                   {"bp", "e"},
                                   {"pid", to.track->pid},
                                   {"tid", to.track->tid},
                                   {"ts", us(at_end ? b.end_ns - 1 : b.start_ns + 1)}}));
  }

  void add_flows() {
    for (const profile::Arrow& a : profile::arrows(p_, layout_)) {
      const SliceRef& from = op_slices_[a.from];
      if (!from.track) continue;
      switch (a.to) {
        case profile::Arrow::To::op:
          if (!op_slices_[a.index].track) break;
          flow(from, op_slices_[a.index], a.at_end, a.at_end ? "wait" : "dependency");
          break;
        case profile::Arrow::To::host_wait:
          flow(from, host_wait_slices_[a.index], a.at_end, "host wait");
          break;
        case profile::Arrow::To::callback:
          flow(from, callback_slices_[a.index], a.at_end, "callback");
          break;
      }
    }
    // Records: a mark where the op they tied ends (when the event passed it).
    for (const ProfiledRecord& r : p_.records()) {
      const SliceRef* op = r.op ? op_slice(r.op) : nullptr;
      if (!op) continue;
      marks_.push_back(Json::object({{"ph", "i"},
                                     {"s", "t"},
                                     {"pid", op->track->pid},
                                     {"tid", op->track->tid},
                                     {"name", "event " + std::to_string(r.event)},
                                     {"cat", "record"},
                                     {"ts", us(op->slice().end_ns)},
                                     {"args", Json::object({{"event", r.event},
                                                            {"event_name", r.event_name},
                                                            {"op", r.op},
                                                            {"recorded_at_us", r.at_us}})}}));
    }
  }

  int pid_of(Device d) const {
    for (std::size_t i = 0; i < layout_.devices.size(); ++i) {
      if (layout_.devices[i] == d) return static_cast<int>(i) + 1;
    }
    return 0;
  }

  std::string serialize() {
    // One event a line: the file stays readable and diffable, and still one JSON document.
    std::string out = "{\"traceEvents\":[\n";
    bool first = true;
    auto emit = [&](const Json& ev) {
      if (!first) out += ",\n";
      first = false;
      out += ev.dump();
    };
    const ProcessLabel& label = p_.process_label();
    // "rank 2 · cuda:0": in a trace merged with other ranks' (or opened beside them) each
    // process says which rank it belongs to.
    const std::string prefix = label.rank >= 0 ? "rank " + std::to_string(label.rank) + " · " : "";
    for (std::size_t i = 0; i < processes_.size(); ++i) {
      const auto& [pid, name] = processes_[i];
      emit(Json::object({{"ph", "M"},
                         {"name", "process_name"},
                         {"pid", pid},
                         {"args", Json::object({{"name", prefix + name}})}}));
      emit(Json::object({{"ph", "M"},
                         {"name", "process_sort_index"},
                         {"pid", pid},
                         {"args", Json::object({{"sort_index", static_cast<int>(i)}})}}));
    }
    for (const auto& t : tracks_) {
      emit(Json::object({{"ph", "M"},
                         {"name", "thread_name"},
                         {"pid", t->pid},
                         {"tid", t->tid},
                         {"args", Json::object({{"name", t->name}})}}));
      emit(Json::object({{"ph", "M"},
                         {"name", "thread_sort_index"},
                         {"pid", t->pid},
                         {"tid", t->tid},
                         {"args", Json::object({{"sort_index", t->sort_index}})}}));
    }
    for (const auto& t : tracks_) {
      for (Slice& s : t->slices) {
        s.event["ts"] = us(s.start_ns);
        s.event["dur"] = us(s.end_ns - s.start_ns);
        emit(s.event);
      }
    }
    for (const Json& ev : marks_) emit(ev);
    for (const Json& ev : unfinished_) emit(ev);
    for (const Json& ev : flows_) emit(ev);
    out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
    // Who wrote it, and on which clock: what `eventide trace merge` aligns traces by.
    Json other = Json::object({{"producer", "eventide " + std::string(version())},
                               {"duration_us", p_.duration_us()},
                               {"clock", "steady"},
                               {"start_ns", p_.start_ns()},
                               {"clock_offset_ns", label.clock_offset_ns},
                               {"host", label.host.empty() ? host_name() : label.host},
                               {"os_pid", static_cast<std::int64_t>(getpid())}});
    if (label.rank >= 0) other["rank"] = label.rank;
    if (label.size > 0) other["size"] = label.size;
    out += other.dump();
    out += "}\n";
    return out;
  }

  const Profile& p_;
  Layout layout_;
  std::vector<std::pair<int, std::string>> processes_;
  std::vector<std::unique_ptr<Track>> tracks_;
  std::vector<SliceRef> op_slices_;
  std::vector<SliceRef> host_wait_slices_;
  std::vector<SliceRef> callback_slices_;
  std::vector<Json> flows_, marks_, unfinished_;
  std::uint64_t flow_ids_ = 0;
  int host_pid_ = 0;
};

}  // namespace

std::string Profile::chrome_trace() const { return TraceWriter(*this).write(); }

void Profile::export_chrome_trace(const std::string& path) const {
  profile::write_text_file(path, chrome_trace(), "export_chrome_trace");
}

}  // namespace eventide
