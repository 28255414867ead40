#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "base/strings.h"
#include "base/timer.h"

namespace paddock::cli {
namespace {

std::string Clock(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  return s >= 3600 ? StrFormat("%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60)
                   : StrFormat("%ld:%02ld", s / 60, s % 60);
}

}  // namespace

Progress::Progress(std::string label, double total, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      t0_(NowSeconds()),
      tty_(isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() {
  Finish();
}

void Progress::Update(double done) {
  done_ = done;
  const double now = NowSeconds();
  // A terminal: redraw up to 10 times a second; a log: a line every 5 seconds.
  if (now - last_draw_ < (tty_ ? 0.1 : 5.0)) return;
  last_draw_ = now;
  Draw(false);
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  Draw(true);
}

void Progress::Draw(bool final) {
  const double elapsed = NowSeconds() - t0_;
  const double rate = elapsed > 0 ? done_ / elapsed : 0;
  std::string line = label_ + " ";
  if (total_ > 0) {
    const double f = std::clamp(done_ / total_, 0.0, 1.0);
    if (tty_) {
      const int width = 24, fill = static_cast<int>(f * width + 0.5);
      line += "[" + std::string(static_cast<size_t>(fill), '#') +
              std::string(static_cast<size_t>(width - fill), '.') + "] ";
    }
    line += StrFormat("%3.0f%% %.0f/%.0f %s", 100 * f, done_, total_, unit_.c_str());
  } else {
    line += StrFormat("%.0f %s", done_, unit_.c_str());
  }
  if (rate > 0) line += StrFormat(", %.2f %s/s", rate, unit_.c_str());
  if (final) {
    line += ", " + Clock(elapsed);
  } else if (total_ > 0 && rate > 0) {
    line += ", " + Clock((total_ - done_) / rate) + " left";
  }
  if (tty_)
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void ShowLoadProgress(EngineOptions* eo, std::shared_ptr<Progress>* bar) {
  eo->on_load_progress = [bar](double done, double total) {
    constexpr double kMiB = 1024.0 * 1024.0;
    if (total < 256 * kMiB) return;  // small models load in a blink
    if (!*bar) *bar = std::make_shared<Progress>("loading", total / kMiB, "MiB");
    (*bar)->Update(done / kMiB);
    if (done >= total) (*bar)->Finish();
  };
}

}  // namespace paddock::cli
