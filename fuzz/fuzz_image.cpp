// libFuzzer target: the image decoders (PNG, JPEG, WebP, GIF through their Debian libraries,
// with the size limits checked first) and data: URL / base64 parsing over arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "paddock/error.h"
#include "vision/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  paddock::ImageLimits lim;
  lim.max_pixels = 4'000'000;  // (the fuzzer's memory: large enough for every real path)
  try {
    const paddock::RgbImage img = paddock::DecodeImage(bytes, lim);
    if (img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3) __builtin_trap();
    if (img.width > 0 && img.height > 0) paddock::Resize(img, 7, 5);
  } catch (const paddock::Error&) {
  }
  try {
    paddock::ImageBytesFromUrl(bytes, 1 << 20);
  } catch (const paddock::Error&) {
  }
  return 0;
}
