// The `eventide` program: `eventide demo` runs the torch.mps.Event tutorial's scenarios for
// real, `eventide bench` measures eventide beside its anchors, `eventide info` lists devices.
// Arguments are parsed by CLI11; this file maps its outcomes to the exit statuses of cli.hpp
// (help and version: 0; any usage error, no command included: 2, with the usage of the
// command concerned).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "cli.hpp"

namespace ev = eventide;
namespace cli = eventide::cli;

namespace {

constexpr const char* kDeviceHelp =
    "cpu, cuda or cuda:N; default: $EVENTIDE_DEVICE, else cuda:0 if present, else cpu";

constexpr const char* kFooter =
    "Run 'eventide <command> --help' for a command's options.\n"
    "exit status: 0 success, 1 a check or the device failed, 2 bad usage";

// CLI11's help with the usage line first, in the lower case of the old hand-written help
// (scripts and tests match "usage: eventide <command>").
class Formatter : public CLI::Formatter {
 public:
  Formatter() {
    label("OPTIONS", "options");
    label("SUBCOMMAND", "<command>");
    label("Usage", "usage");
    label("Subcommands", "commands");
    column_width(26);
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    if (app->get_parent() == nullptr) return "usage: " + name + " <command> [options]\n";
    return CLI::Formatter::make_usage(app, std::move(name));
  }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return CLI::Formatter::make_help(app, name, mode);
    return make_usage(app, name) + "\n" + make_description(app) + make_positionals(app) +
           make_groups(app, mode) + make_subcommands(app, mode) + "\n" + make_footer(app);
  }

  // The value's name only. CLI11 also writes "Excludes: --from" here, which then ran into the
  // description ("--list Excludes: --from list the benchmarks"); the description says it.
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string out;
    if (opt->get_type_size() == 0) return out;
    if (!opt->get_type_name().empty()) out += " " + opt->get_type_name();
    if (!opt->get_default_str().empty()) out += "=" + opt->get_default_str();
    // ("N[,N...]" says already that there may be several.)
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size &&
        opt->get_type_name().find("...") == std::string::npos) {
      out += " ...";
    }
    if (opt->get_required()) out += " " + get_label("REQUIRED");
    return out;
  }

  std::string make_option_desc(const CLI::Option* opt) const override {
    std::vector<std::string> names;
    for (const CLI::Option* other : opt->get_excludes()) names.push_back(other->get_name());
    if (names.empty()) return opt->get_description();
    std::sort(names.begin(), names.end());
    std::string list;
    for (std::size_t i = 0; i < names.size(); ++i) {
      list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    }
    return opt->get_description() + "; not with " + list;
  }

  // An option and its description at least two spaces apart; the description on a line of
  // its own where the option is too long for its column.
  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    const std::string name = "  " + make_option_name(opt, is_positional) + make_option_opts(opt);
    const std::string indent(get_column_width(), ' ');
    std::string out = name;
    out += name.size() + 2 > indent.size() ? "\n" + indent : indent.substr(name.size());
    for (char c : make_option_desc(opt)) {
      out += c;
      if (c == '\n') out += indent;
    }
    return out + "\n";
  }
};

// Checks the spelling of a device ("cpu", "cuda:1"); whether it exists is checked after
// parsing, so that the message can list the devices there are.
CLI::Validator device_spelling() {
  return CLI::Validator(
      [](std::string& spec) -> std::string {
        try {
          ev::Device d(spec);
          (void)d;
          return {};
        } catch (const ev::Error& e) {
          return e.what();
        }
      },
      "DEVICE");
}

// One of the demo's scenario numbers, as `--only` takes them (CLI11 splits "2,5" first).
CLI::Validator scenario_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const int count = cli::demo_scenario_count();
        int n = 0;
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, n);
        if (ec == std::errc() && at == end && n >= 1 && n <= count) return {};
        return "'" + text + "' is not a scenario: --only takes scenario numbers from 1 to " +
               std::to_string(count) + ", comma-separated (e.g. --only 2,5); " +
               "'eventide demo --list' lists them";
      },
      "");
}

// The demo's scenarios, a line each ("   2  Wait for an op to complete (tutorial points 2, 3)").
std::string scenario_list() {
  std::string out;
  for (int i = 1; i <= cli::demo_scenario_count(); ++i) {
    char number[16];
    std::snprintf(number, sizeof number, "%4d  ", i);
    out += number + cli::demo_scenario_title(i) + "\n";
  }
  return out;
}

CLI::Validator regex_syntax() {
  return CLI::Validator(
      [](std::string& pattern) -> std::string {
        try {
          std::regex re(pattern);
          (void)re;
          return {};
        } catch (const std::regex_error& e) {
          return "not a regular expression (" + std::string(e.what()) + "): " + pattern;
        }
      },
      "REGEX");
}

// The device named on the command line (or the default one), checked to exist here.
// Errors are reported, and nullopt returned, so the caller exits with kExitUsage.
std::optional<ev::Device> resolve_device(const std::optional<std::string>& spec) {
  try {
    if (!spec) return ev::default_device();
    ev::Device d(*spec);
    if (!ev::is_available(d)) {
      std::string have;
      for (ev::Device x : ev::devices()) have += (have.empty() ? "" : ", ") + x.str();
      std::string why;
      try {
        ev::device_info(d);  // throws, in the runtime's words: no backend, driver or device
      } catch (const ev::Error& e) {
        why = e.what();
        // Without the runtime's "device cuda:3 is not available: ", which this line says.
        const std::string prefix = "device " + d.str() + " is not available: ";
        if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
        why = ": " + why;
      }
      std::fprintf(stderr, "eventide: device %s is not available here (devices: %s)%s\n",
                   d.str().c_str(), have.c_str(), why.c_str());
      return std::nullopt;
    }
    return d;
  } catch (const ev::Error& e) {
    std::fprintf(stderr, "eventide: %s\n", e.what());
    return std::nullopt;
  }
}

// The program's own help (App::help shows the help of the command parsed, if any).
std::string root_help(const CLI::App& app) {
  return app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal);
}

// The innermost command that parsing reached (the program itself if none).
const CLI::App* innermost(const CLI::App& app) {
  const CLI::App* at = &app;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
  return at;
}

// "demo, bench, trace, info, version, help".
std::string command_names(const CLI::App& app) {
  std::string commands;
  for (const CLI::App* sub : app.get_subcommands({})) {
    commands += (commands.empty() ? "" : ", ") + sub->get_name();
  }
  return commands;
}

int usage_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  const CLI::App* at = innermost(app);
  std::string message = e.what();
  // A first word that is not an option and not a command: CLI11 calls it an unexpected
  // argument; to a user it is a command that does not exist.
  if (at == &app && dynamic_cast<const CLI::ExtrasError*>(&e) && argc > 1 && argv[1][0] != '-') {
    message = "unknown command '" + std::string(argv[1]) + "' (commands: " + command_names(app) + ")";
  }
  std::fprintf(stderr, "eventide: %s\n\n%s", message.c_str(), app.help().c_str());
  return cli::kExitUsage;
}

}  // namespace

int eventide::cli::run_command_line(int argc, char** argv) {
  const std::string version = "eventide " + std::string(ev::version());
  CLI::App app{"Asynchronous device work and its synchronization: streams, events, callbacks.",
               "eventide"};
  app.formatter(std::make_shared<Formatter>());
  app.set_help_flag("-h,--help", "print this help and exit");
  app.set_version_flag("--version", version, "print the version and exit");
  app.require_subcommand(0, 1);
  app.footer(kFooter);

  // demo
  std::optional<std::string> demo_device;
  cli::DemoOptions demo_options;
  bool demo_list = false;
  CLI::App* demo = app.add_subcommand(
      "demo", "run every scenario of the torch.mps.Event tutorial (events, waiting, polling, timing, "
              "callbacks, streams) and print what happened");
  demo->add_option("--device", demo_device, kDeviceHelp)->check(device_spelling());
  demo->add_option("--trace", demo_options.trace_path,
                   "run under ev::Profiler and save a Chrome trace (Perfetto, chrome://tracing)")
      ->type_name("FILE");
  demo->add_option("--timeline", demo_options.timeline_path,
                   "run under ev::Profiler and save the timeline as a self-contained HTML page")
      ->type_name("FILE");
  demo->add_option("--only", demo_options.only,
                   "run only these scenarios, by number from 1 to " +
                       std::to_string(cli::demo_scenario_count()) +
                       ", comma-separated (e.g. --only 16 or --only 2,5; the list below)")
      ->delimiter(',')
      ->check(scenario_number())
      ->type_name("N[,N...]");
  demo->add_flag("--list", demo_list, "list the scenarios, by number, and run nothing");
  demo->footer("scenarios:\n" + scenario_list() +
               "\nexit status: 0 every scenario passed, 1 a scenario failed (or the profile was not saved), "
               "2 bad usage");

  // bench
  std::optional<std::string> bench_device;
  cli::BenchOptions bench_options;
  CLI::App* bench = app.add_subcommand(
      "bench", "measure eventide beside its anchors (the standard library, BLAS, raw CUDA) in "
               "this process; print the table, write JSON, Markdown and an SVG chart");
  bench->add_option("--device", bench_device, kDeviceHelp)->check(device_spelling());
  bench->add_flag("--quick", bench_options.quick,
                  "fewer rounds and smaller matrices (about 10 s on 2 cores)");
  bench->add_option("--filter", bench_options.filter,
                    "run only the benchmarks whose name matches (regex search; see --list)")
      ->check(regex_syntax());
  bench->add_option("--out", bench_options.out_dir,
                    std::string("write bench.json, bench.md and bench.svg into DIR (made if "
                                "missing); default: ./") + cli::kDefaultBenchDir)
      ->type_name("DIR");
  CLI::Option* list = bench->add_flag(
      "--list", bench_options.list,
      "list the benchmarks of a full run and of --quick (marked where they differ) and run nothing");
  CLI::Option* from = bench->add_option(
      "--from", bench_options.from,
      "measure nothing: draw bench.md and bench.svg again from this bench.json, into --out");
  from->type_name("FILE")->check(CLI::ExistingFile.description(""));
  from->excludes(list)->excludes("--quick")->excludes("--filter");
  bench->footer("Times are p50 / p99: the table writes both, the chart draws a bar to the p50 and "
                "a whisker to the p99.\nGoals missed are reported in the table, not in the exit "
                "status.");

  // trace merge
  cli::TraceMergeOptions merge_options;
  CLI::App* trace = app.add_subcommand("trace", "work with Chrome traces of eventide's profiler");
  trace->require_subcommand(1);
  CLI::App* merge = trace->add_subcommand(
      "merge", "merge the traces of several processes of one job (one per rank, e.g. under mpirun) "
               "into one trace on one clock, each rank's processes renumbered and sorted by rank");
  // The output only by -o: when it was the first positional name, `merge r0.json r1.json`
  // overwrote r0.json. It is not `required()` here, so that its absence gets a message of
  // its own (below).
  merge->add_option("-o,--output", merge_options.output,
                    "the merged trace to write (a new file, or one to replace; never an input)")
      ->type_name("OUT.json");
  merge->add_option("inputs", merge_options.inputs,
                    "the traces to merge (Profile.export_chrome_trace, one per rank)")
      ->required()
      ->type_name("IN.json");
  merge->footer("e.g. eventide trace merge -o job.json trace-0.json trace-1.json\n"
                "Each trace is shifted by its clock offset (ev::set_process_label; 0 for processes of "
                "one machine,\nwhich share the steady clock). A trace without a rank takes its "
                "place in the list as its rank.");

  CLI::App* info = app.add_subcommand("info", "list the devices, the default device and the version");
  CLI::App* version_command = app.add_subcommand("version", "print the version");
  std::optional<std::string> help_topic;
  CLI::App* help = app.add_subcommand("help", "print this help, or a command's");
  help->add_option("command", help_topic, "the command to explain");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // the help of the innermost command, on stdout
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e, argc, argv);
  }

  // No command: a usage error, as for a command that does not exist (`eventide help` and
  // `eventide --help` are the ways to ask for the help).
  if (app.get_subcommands().empty()) {
    std::fprintf(stderr, "eventide: no command given (commands: %s)\n\n%s", command_names(app).c_str(),
                 root_help(app).c_str());
    return cli::kExitUsage;
  }
  if (merge->parsed() && merge_options.output.empty()) {
    // The call as it should read: the old form's first name as the output where it is no
    // file yet (`merge job.json r0.json r1.json`), else a new name before all of them.
    const std::vector<std::string>& names = merge_options.inputs;
    std::error_code ec;
    const bool first_is_new = names.size() > 1 && !std::filesystem::exists(names.front(), ec) && !ec;
    std::string call = "eventide trace merge -o " + (first_is_new ? names.front() : std::string("merged.json"));
    for (std::size_t i = first_is_new ? 1 : 0; i < names.size(); ++i) call += " " + names[i];
    std::fprintf(stderr,
                 "eventide trace merge: no output named: name it with -o (%s); every name without "
                 "-o is an input, so that no trace is overwritten\n\n%s",
                 call.c_str(), app.help().c_str());
    return cli::kExitUsage;
  }

  try {
    if (demo->parsed() && demo_list) {
      std::fputs(scenario_list().c_str(), stdout);
      return cli::kExitOk;
    }
    if (demo->parsed()) {
      std::optional<ev::Device> d = resolve_device(demo_device);
      if (!d) return cli::kExitUsage;
      demo_options.device = *d;
      return cli::run_demo(demo_options);
    }
    if (bench->parsed() && bench_options.from) return cli::run_bench(bench_options);
    if (bench->parsed()) {
      std::optional<ev::Device> d = resolve_device(bench_device);
      if (!d) return cli::kExitUsage;
      bench_options.device = *d;
      for (int i = 0; i < argc; ++i) bench_options.command_line += (i ? " " : "") + std::string(argv[i]);
      return cli::run_bench(bench_options);
    }
    if (merge->parsed()) return cli::run_trace_merge(merge_options);
    if (info->parsed()) return cli::run_info();
    if (version_command->parsed()) {
      std::printf("%s\n", version.c_str());
      return cli::kExitOk;
    }
    if (help->parsed() && help_topic) {
      for (const CLI::App* sub : app.get_subcommands({})) {
        if (sub->get_name() == *help_topic) {
          std::fputs(sub->help("eventide").c_str(), stdout);
          return cli::kExitOk;
        }
      }
      std::fprintf(stderr, "eventide: help: unknown command '%s'\n\n%s", help_topic->c_str(),
                   root_help(app).c_str());
      return cli::kExitUsage;
    }
  } catch (const std::exception& e) {
    // Scenarios and benchmarks catch their own errors; this is for the device failing
    // outside them.
    std::fprintf(stderr, "eventide %s: %s\n", innermost(app)->get_name().c_str(), e.what());
    return cli::kExitFailed;
  }
  // `help` alone: the help, as asked for.
  std::fputs(root_help(app).c_str(), stdout);
  return cli::kExitOk;
}
