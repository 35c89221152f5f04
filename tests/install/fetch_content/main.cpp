// Built with eventide from source in the same build (FetchContent): a matmul, an event on
// it, and the version the headers were compiled with against the library's.
#include <eventide/eventide.hpp>

#include <cstdio>
#include <string_view>

namespace ev = eventide;

int main() {
  ev::Tensor out = ev::matmul(ev::ones({64, 64}), ev::ones({64, 64}));
  ev::Event e;
  e.record(out);
  e.wait();
  const bool values_ok = out.to_vector<float>().at(0) == 64.0f;
  const bool version_ok = ev::version() == std::string_view(EVENTIDE_VERSION_STRING);
  std::printf("fetch-content consumer of eventide %s (headers %d.%d.%d): %s\n",
              std::string(ev::version()).c_str(), EVENTIDE_VERSION_MAJOR, EVENTIDE_VERSION_MINOR,
              EVENTIDE_VERSION_PATCH, values_ok && version_ok ? "ok" : "FAILED");
  return values_ok && version_ok ? 0 : 1;
}
