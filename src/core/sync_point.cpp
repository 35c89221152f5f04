// SyncPoint, and the synchronize calls built on it.

#include <algorithm>

#include "core/backend.hpp"
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

void SyncPoint::add_device(Device device) {
  // Every stream's point first (a marker on a GPU stream: it covers eventide's work held on
  // the host too), then the device's own point, taken after them: it covers what other code
  // queued there.
  detail::DeviceContext& ctx = detail::Runtime::get().context(device);
  for (auto& s : ctx.live_streams()) add(s);
  if (std::optional<detail::DevicePoint> p = ctx.backend().device_wide_point()) {
    detail::Timeline* t = p->timeline.detach();  // its reference goes to the shared_ptr
    device_points_.push_back(
        DevicePoint{device, std::shared_ptr<detail::Timeline>(t, [](detail::Timeline* tl) { tl->release(); }), p->seq});
  }
}

SyncPoint::SyncPoint(Device device) { add_device(device); }

SyncPoint::SyncPoint() {
  for (Device d : detail::Runtime::get().devices()) add_device(d);
}

bool SyncPoint::query() const {
  return std::all_of(points_.begin(), points_.end(),
                     [](const Point& p) {
                       if (p.stream->timeline().passed(p.seq)) return true;
                       p.stream->timeline().demand(p.seq, detail::Demand::soon);  // someone looks
                       return false;
                     }) &&
         std::all_of(device_points_.begin(), device_points_.end(),
                     [](const DevicePoint& p) { return p.timeline->passed(p.seq); });
}

bool SyncPoint::wait_until(const detail::Deadline& deadline) const {
  detail::nvtx::Scope range("synchronize");
  for (const Point& p : points_) {
    if (!detail::wait_for_fence(p.stream->timeline(), p.seq, deadline)) return false;
  }
  for (const DevicePoint& p : device_points_) {
    if (!detail::wait_for_fence(*p.timeline, p.seq, deadline)) return false;
  }
  for (const Point& p : points_) {
    if (auto e = p.stream->device_error()) std::rethrow_exception(e);
  }
  for (const DevicePoint& p : device_points_) {
    if (auto e = detail::Runtime::get().context(p.device).backend().device_error()) std::rethrow_exception(e);
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
bool Stream::synchronize_until(std::chrono::steady_clock::time_point deadline) const {
  return SyncPoint(*this).wait_until(deadline);
}

}  // namespace eventide
