// A progress bar for `eventide bench` on stderr: steps done of the total, the current step's
// name, and an estimate of the time left.
//
// On a terminal the line is redrawn in place (carriage return), so the bar stays on one line;
// otherwise (a log, CI) each step gets a line of its own, so the log shows what ran when.
// The estimate starts from each step's expected duration and is scaled by how long the steps
// done so far took against their estimates. It is drawn only between steps, never while one
// runs: a timer thread would wake up in the middle of the measurements.
// Thread-safety: one thread at a time.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace eventide::cli {

class Progress {
 public:
  // `estimates_s`: the expected duration of each step, in order.
  Progress(std::FILE* out, std::vector<double> estimates_s);
  // Whether `out` is a terminal (redrawn in place) or not (a line per step).
  static bool is_terminal(std::FILE* out);

  // Step `index` (0-based) starts; `name` and `what` say which.
  void start(std::size_t index, const std::string& name, const std::string& what);
  // The step started last has finished.
  void finish();
  // Every step is done: clears the bar (terminal) and prints "<n> steps in <t> s".
  void done(const std::string& summary);

 private:
  using Clock = std::chrono::steady_clock;
  double seconds_left() const;
  void draw(const std::string& line);

  std::FILE* out_;
  bool terminal_;
  std::vector<double> estimates_s_;
  std::size_t current_ = 0;
  std::size_t finished_ = 0;
  double estimated_done_s_ = 0;  // estimates of the finished steps, summed
  double actual_done_s_ = 0;     // what they took
  Clock::time_point step_start_{};
  Clock::time_point start_;
  std::size_t last_width_ = 0;
};

// "12 s", "1 min 5 s".
std::string format_seconds(double s);

}  // namespace eventide::cli
