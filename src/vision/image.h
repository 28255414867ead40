// vision/image.h: images in: decoding (PNG, JPEG, WebP, GIF), data: URLs, and the pixel
// operations the vision encoders' preprocessing is made of (resize, pad, crop, normalize).
//
// Decoding goes through the Debian libraries every distribution keeps patched (libpng,
// libjpeg-turbo, libwebp, giflib), behind one function that sniffs the format from the bytes,
// checks the declared size against ImageLimits before any pixel is allocated (decompression
// bombs) and turns every library failure into an Error naming the image's problem.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace paddock {

// 8-bit RGB, row-major, no padding.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
  uint8_t* At(int x, int y) { return rgb.data() + (static_cast<size_t>(y) * width + x) * 3; }
  const uint8_t* At(int x, int y) const {
    return rgb.data() + (static_cast<size_t>(y) * width + x) * 3;
  }
};

struct ImageLimits {
  size_t max_bytes = 20u << 20;     // encoded size
  int64_t max_pixels = 40'000'000;  // width * height as declared by the header
  int max_side = 16384;             // either side
};

// Decodes PNG, JPEG, WebP or GIF (the first frame of an animated one, on its logical screen)
// to RGB; alpha is dropped (as llama.cpp's loader does, so the same file gives the same
// pixels). Throws Error: an unknown format (naming the leading bytes), sizes over the limits,
// truncated or corrupt data.
RgbImage DecodeImage(std::string_view bytes, const ImageLimits& limits = {});

// The bytes of an image given as a URL: only `data:[<media type>][;base64],<data>` (an image/*
// type or none). http(s) URLs are refused (the server fetches nothing), as are other schemes
// and non-image media types. Throws Error.
std::string ImageBytesFromUrl(std::string_view url, size_t max_bytes);
// Base64 image data as Anthropic's and Ollama's APIs send it (a data: URL is also taken).
std::string ImageBytesFromBase64(std::string_view data, size_t max_bytes);

// A 64-bit hash of the pixels and the size: the identity of an image for the encoder's cache
// and the KV prefix cache.
uint64_t PixelHash(const RgbImage& img);

enum class ResizeFilter { kTriangle, kCatmullRom };
// Separable resampling with the filter widened by the scale when shrinking (antialiasing),
// edges clamped, sample centers at (i + 0.5) / scale - 0.5; rounded to 8 bits at the end.
RgbImage Resize(const RgbImage& src, int width, int height,
                ResizeFilter filter = ResizeFilter::kTriangle);
// Fits the image into width x height keeping its aspect ratio (each side ceil(side * scale),
// at most the target), centered on a canvas of `pad` color: llama.cpp's resize with padding.
RgbImage ResizePadded(const RgbImage& src, int width, int height, const uint8_t pad[3],
                      ResizeFilter filter = ResizeFilter::kTriangle);
RgbImage Crop(const RgbImage& src, int x, int y, int width, int height);
// Channel-planar floats (3 x height x width), (v / 255 - mean[c]) / std[c].
void Normalize(const RgbImage& img, const float mean[3], const float std[3], float* out);

}  // namespace paddock
