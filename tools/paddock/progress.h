// tools/paddock/progress.h: progress of long work on standard error. At a terminal, one bar
// redrawn in place with the rate and the time left; otherwise (a log, CI) a plain line at most
// every few seconds and at the end, so logs stay readable.
#pragma once

#include <memory>
#include <string>

#include "paddock/engine.h"

namespace paddock::cli {

class Progress {
 public:
  // total: units of work (0: unknown, a spinner of counts); unit: what is counted ("tensors").
  Progress(std::string label, double total, std::string unit);
  ~Progress();  // Finish()
  void Update(double done);
  void Add(double n) { Update(done_ + n); }
  void Finish();
  bool tty() const { return tty_; }

 private:
  void Draw(bool final);
  std::string label_, unit_;
  double total_, done_ = 0, t0_, last_draw_ = 0;
  bool tty_, finished_ = false;
};

// A "loading" bar (MiB) for models of 256 MiB or more while the engine reads and re-lays out the
// weights (EngineOptions::on_load_progress); `bar` keeps it alive.
void ShowLoadProgress(paddock::EngineOptions* eo, std::shared_ptr<Progress>* bar);

}  // namespace paddock::cli
