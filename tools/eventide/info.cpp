// `eventide info`: what this build of eventide sees on this machine.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli.hpp"

namespace eventide::cli {

int run_info() {
  std::printf("eventide %s\n", std::string(version()).c_str());

  std::vector<Device> all = devices();
  std::printf("devices (%zu):\n", all.size());
  for (Device d : all) {
    DeviceInfo info = device_info(d);
    std::printf("  %-8s %s\n", d.str().c_str(), info.name.c_str());
    if (!info.description.empty()) std::printf("  %-8s %s\n", "", info.description.c_str());
  }
  if (!is_available(Device::cuda(0))) {
    // Why there is no GPU, in the words of the runtime (no CUDA backend in this build, no
    // driver, no device), without its "device cuda:0 is not available: ", which the line says.
    try {
      device_info(Device::cuda(0));
    } catch (const Error& e) {
      std::string why = e.what();
      const std::string prefix = "device cuda:0 is not available: ";
      if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
      std::printf("  %-8s none: %s\n", "cuda", why.c_str());
    }
  }

  // default_device() throws for a bad EVENTIDE_DEVICE; say so here rather than fail, since
  // listing what is available is exactly what someone fixing that variable needs.
  const char* env = std::getenv("EVENTIDE_DEVICE");
  try {
    Device d = default_device();
    if (env) {
      std::printf("default device: %s (EVENTIDE_DEVICE=%s)\n", d.str().c_str(), env);
    } else {
      std::printf("default device: %s (EVENTIDE_DEVICE unset: cuda:0 if present, else cpu)\n",
                  d.str().c_str());
    }
  } catch (const Error& e) {
    // A misconfigured environment is the caller's to fix, like a bad argument.
    std::printf("default device: none: %s\n", e.what());
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace eventide::cli
