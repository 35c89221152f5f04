// eventide/detail/duration.hpp: timeouts of any std::chrono duration, as nanoseconds.
//
// Waits take std::chrono::nanoseconds; the templates that take any duration convert through
// saturating_ns, so that hours::max(), seconds::max() or duration<double>(1e300) mean "as
// long as it takes" instead of overflowing into a negative timeout (a wait that returns false
// at once), and NaN means as long as it takes too.
#pragma once

#include <chrono>
#include <limits>

namespace eventide::detail {

template <class Rep, class Period>
constexpr std::chrono::nanoseconds saturating_ns(std::chrono::duration<Rep, Period> d) noexcept {
  using std::chrono::nanoseconds;
  using Wide = std::chrono::duration<long double, std::nano>;
  const Wide wide = std::chrono::duration_cast<Wide>(d);
  constexpr auto kMax = static_cast<long double>(std::numeric_limits<nanoseconds::rep>::max());
  constexpr auto kMin = static_cast<long double>(std::numeric_limits<nanoseconds::rep>::min());
  if (!(wide.count() < kMax)) return nanoseconds::max();  // also NaN
  if (wide.count() <= kMin) return nanoseconds::min();
  return std::chrono::duration_cast<nanoseconds>(d);
}

}  // namespace eventide::detail
