// The `eventide` program: `eventide demo` runs the seed tutorial's scenarios for real,
// `eventide info` lists devices. Arguments are parsed by hand: there are two commands and one
// option, not enough to be worth a dependency.
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"

namespace ev = eventide;
namespace cli = eventide::cli;

namespace {

constexpr const char* kUsage =
    "usage: eventide <command> [options]\n"
    "\n"
    "commands:\n"
    "  demo [--device DEVICE]  run every scenario of the seed tutorial (events, waiting,\n"
    "                          polling, timing, callbacks, streams) and print what happened\n"
    "  info                    list the devices, the default device and the version\n"
    "  help                    print this help (also --help, -h)\n"
    "  version                 print the version (also --version)\n"
    "\n"
    "options:\n"
    "  --device DEVICE         cpu, cuda or cuda:N; default: $EVENTIDE_DEVICE, else cuda:0\n"
    "                          if present, else cpu\n"
    "\n"
    "exit status: 0 success, 1 a check or the device failed, 2 bad usage\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "eventide: %s\n\n%s", message.c_str(), kUsage);
  return cli::kExitUsage;
}

bool is_help(std::string_view arg) { return arg == "help" || arg == "--help" || arg == "-h"; }

// The device named on the command line (or the default one), checked to exist here.
// Errors are reported, and nullopt returned, so the caller exits with kExitUsage.
std::optional<ev::Device> resolve_device(const std::optional<std::string>& spec) {
  try {
    if (!spec) return ev::default_device();
    ev::Device d(*spec);
    if (!ev::is_available(d)) {
      std::string have;
      for (ev::Device x : ev::devices()) have += (have.empty() ? "" : ", ") + x.str();
      std::fprintf(stderr, "eventide: device %s is not available here (devices: %s)\n",
                   d.str().c_str(), have.c_str());
      return std::nullopt;
    }
    return d;
  } catch (const ev::Error& e) {
    std::fprintf(stderr, "eventide: %s\n", e.what());
    return std::nullopt;
  }
}

int demo_command(const std::vector<std::string>& args) {
  std::optional<std::string> device;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (is_help(arg)) {
      std::fputs(kUsage, stdout);
      return cli::kExitOk;
    }
    if (arg == "--device") {
      if (i + 1 == args.size()) return usage_error("--device needs a value (cpu, cuda:0, ...)");
      device = args[++i];
    } else if (arg.rfind("--device=", 0) == 0) {
      device = arg.substr(std::string_view("--device=").size());
    } else {
      return usage_error("demo: unknown argument '" + arg + "'");
    }
  }
  std::optional<ev::Device> d = resolve_device(device);
  if (!d) return cli::kExitUsage;
  return cli::run_demo(*d);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || is_help(args[0])) {
    std::fputs(kUsage, stdout);
    return cli::kExitOk;
  }
  const std::string command = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    if (command == "demo") return demo_command(rest);
    if (command == "info") {
      if (!rest.empty()) return usage_error("info takes no arguments");
      return cli::run_info();
    }
    if (command == "version" || command == "--version") {
      std::printf("eventide %s\n", std::string(ev::version()).c_str());
      return cli::kExitOk;
    }
  } catch (const std::exception& e) {
    // Scenarios catch their own errors; this is for the device failing outside them.
    std::fprintf(stderr, "eventide %s: %s\n", command.c_str(), e.what());
    return cli::kExitFailed;
  }
  return usage_error("unknown command '" + command + "'");
}
