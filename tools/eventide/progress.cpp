#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace eventide::cli {

std::string format_seconds(double s) {
  char buf[32];
  if (s < 10) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  } else {
    std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  }
  return buf;
}

Progress::Progress(std::FILE* out, std::vector<double> estimates_s)
    : out_(out), terminal_(is_terminal(out)), estimates_s_(std::move(estimates_s)), start_(Clock::now()) {}

bool Progress::is_terminal(std::FILE* out) { return isatty(fileno(out)) == 1; }

double Progress::seconds_left() const {
  double left = 0;
  for (std::size_t i = finished_; i < estimates_s_.size(); ++i) left += estimates_s_[i];
  // How far off the estimates were so far, within reason: one slow step (a machine busy
  // for a moment) should not multiply the rest.
  double scale = estimated_done_s_ > 0 ? actual_done_s_ / estimated_done_s_ : 1.0;
  scale = std::clamp(scale, 0.25, 4.0);
  return left * scale;
}

void Progress::start(std::size_t index, const std::string& name, const std::string& what) {
  current_ = index;
  step_start_ = Clock::now();
  const std::size_t total = estimates_s_.size();
  // Appended piece by piece: "[" + std::to_string(...) draws a false -Wrestrict from GCC 12.
  std::string counter = "[";
  counter += std::to_string(index + 1);
  counter += '/';
  counter += std::to_string(total);
  counter += ']';
  std::string left = "~";
  left += format_seconds(seconds_left());
  left += " left";
  if (terminal_) {
    constexpr std::size_t kWidth = 20;
    const std::size_t filled = total ? kWidth * index / total : 0;
    const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
    draw(counter + " " + bar + " " + name + "  " + left);
  } else {
    std::fprintf(out_, "eventide bench: %s %s: %s (%s)\n", counter.c_str(), name.c_str(),
                 what.c_str(), left.c_str());
    std::fflush(out_);
  }
}

void Progress::finish() {
  const double took = std::chrono::duration<double>(Clock::now() - step_start_).count();
  if (current_ < estimates_s_.size()) estimated_done_s_ += estimates_s_[current_];
  actual_done_s_ += took;
  finished_ = current_ + 1;
}

void Progress::done(const std::string& summary) {
  if (terminal_ && last_width_ > 0) {
    std::fprintf(out_, "\r%s\r", std::string(last_width_, ' ').c_str());
  }
  const double total = std::chrono::duration<double>(Clock::now() - start_).count();
  std::fprintf(out_, "eventide bench: %s in %s\n", summary.c_str(), format_seconds(total).c_str());
  std::fflush(out_);
}

void Progress::draw(const std::string& line) {
  // Pad over what the previous, longer line left on screen (no terminal escape codes, so a
  // dumb terminal shows it right too).
  std::string padded = line;
  if (padded.size() < last_width_) padded.append(last_width_ - padded.size(), ' ');
  last_width_ = line.size();
  std::fprintf(out_, "\r%s", padded.c_str());
  std::fflush(out_);
}

}  // namespace eventide::cli
