// SyncPoint, and the synchronize calls built on it.

#include <algorithm>

#include "core/nvtx.hpp"
#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "eventide/runtime.hpp"
#include "eventide/stream.hpp"

namespace eventide {

void SyncPoint::add(const std::shared_ptr<detail::StreamState>& stream) {
  points_.push_back(Point{stream, stream->sync_point()});
}

SyncPoint::SyncPoint(const Stream& stream) { add(stream.state()); }

SyncPoint::SyncPoint(Device device) {
  // Every stream's point first (a marker on a GPU stream), then the waits.
  for (auto& s : detail::Runtime::get().context(device).live_streams()) add(s);
}

SyncPoint::SyncPoint() {
  auto& rt = detail::Runtime::get();
  for (Device d : rt.devices()) {
    for (auto& s : rt.context(d).live_streams()) add(s);
  }
}

bool SyncPoint::query() const {
  return std::all_of(points_.begin(), points_.end(),
                     [](const Point& p) { return p.stream->timeline().passed(p.seq); });
}

bool SyncPoint::wait_until(const detail::Deadline& deadline) const {
  detail::nvtx::Scope range("synchronize");
  for (const Point& p : points_) {
    if (!detail::wait_for_fence(p.stream->timeline(), p.seq, deadline)) return false;
  }
  for (const Point& p : points_) {
    if (auto e = p.stream->device_error()) std::rethrow_exception(e);
  }
  return true;
}

void SyncPoint::wait() const { (void)wait_until(std::nullopt); }

bool SyncPoint::wait_for(std::chrono::nanoseconds timeout) const {
  return wait_until(detail::deadline_after(timeout));
}

void synchronize() { SyncPoint().wait(); }
std::size_t empty_cache() { return detail::Runtime::get().empty_cache(); }
void synchronize(Device device) { SyncPoint(device).wait(); }
bool synchronize_for(std::chrono::nanoseconds timeout) { return SyncPoint().wait_for(timeout); }
bool synchronize_for(Device device, std::chrono::nanoseconds timeout) {
  return SyncPoint(device).wait_for(timeout);
}

bool Stream::synchronize_for(std::chrono::nanoseconds timeout) const {
  return SyncPoint(*this).wait_for(timeout);
}
void Stream::synchronize() const { SyncPoint(*this).wait(); }

}  // namespace eventide
