// engine/calibration.h: what quantization asks of a model, without assembling its internals:
// activation statistics (the mean square of every matrix input channel) and each matrix's
// sensitivity (the KL divergence of the next-token distributions when only that matrix is
// replaced by its quantized round trip), over windows of a calibration text.
//
// Used by `paddock quantize --calib` (AWQ-style scaling, weighted rounding) and
// `--target-bpw` (mixed precision). Knows no quantization type: the caller supplies the round
// trip.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace paddock {

class Calibration {
 public:
  // Loads the model and cuts `text` into up to max_windows windows of ctx tokens (BOS first).
  // Throws Error if the text is too short for one window.
  Calibration(const std::string& model_path, const std::string& text, int ctx, int max_windows);
  ~Calibration();

  // Mean squares of every matrix input channel over the windows, by tensor name
  // ("blk.0.attn_q.weight", ..., "output.weight").
  std::map<std::string, std::vector<float>> ActivationStats();

  // In place: a rows x cols float matrix through the quantizer and back.
  using RoundTrip = std::function<void(float* m, int64_t rows, int64_t cols)>;
  // KL(reference || with `tensor` round-tripped), or -1 if it is not a matrix this can swap.
  double Sensitivity(const std::string& tensor, const RoundTrip& round_trip);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace paddock
