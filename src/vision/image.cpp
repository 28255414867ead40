// vision/image.cpp: decoding through libpng, libjpeg-turbo, libwebp and giflib; resampling.
#include "vision/image.h"

#include <gif_lib.h>
#include <jpeglib.h>
#include <png.h>
#include <webp/decode.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <memory>

#include "base/base64.h"
#include "base/strings.h"
#include "paddock/error.h"

namespace paddock {

namespace {

void CheckSize(const char* format, int64_t w, int64_t h, const ImageLimits& lim) {
  if (w <= 0 || h <= 0)
    Fail("the %s image declares an empty size (%lld x %lld)", format, static_cast<long long>(w),
         static_cast<long long>(h));
  if (w > lim.max_side || h > lim.max_side || w * h > lim.max_pixels)
    Fail("the %s image is %lld x %lld pixels; the limit is %d pixels a side and %lld in all",
         format, static_cast<long long>(w), static_cast<long long>(h), lim.max_side,
         static_cast<long long>(lim.max_pixels));
}

RgbImage Blank(int w, int h) {
  RgbImage img;
  img.width = w;
  img.height = h;
  img.rgb.assign(static_cast<size_t>(w) * static_cast<size_t>(h) * 3, 0);
  return img;
}

// ---- PNG (libpng's simplified API) ----
RgbImage DecodePng(std::string_view bytes, const ImageLimits& lim) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  struct Free {
    png_image* p;
    ~Free() { png_image_free(p); }
  } free_png{&png};
  if (png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()) == 0)
    Fail("the PNG image is corrupt: %s", png.message);
  CheckSize("PNG", png.width, png.height, lim);
  png.format = PNG_FORMAT_RGBA;  // alpha read, then dropped (not composited)
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(png));
  if (png_image_finish_read(&png, nullptr, rgba.data(), 0, nullptr) == 0)
    Fail("the PNG image is truncated or corrupt: %s", png.message);
  RgbImage img = Blank(static_cast<int>(png.width), static_cast<int>(png.height));
  for (size_t i = 0, n = static_cast<size_t>(img.width) * img.height; i < n; ++i)
    std::memcpy(&img.rgb[i * 3], &rgba[i * 4], 3);
  return img;
}

// ---- JPEG (libjpeg-turbo; errors longjmp out of the library) ----
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

void JpegSilence(j_common_ptr, int) {}

// No C++ object with a destructor lives between setjmp and a longjmp to it.
bool DecodeJpegInto(std::string_view bytes, const ImageLimits& lim, RgbImage* img,
                    std::string* error) {
  jpeg_decompress_struct cinfo;
  JpegError jerr;
  cinfo.err = jpeg_std_error(&jerr.mgr);
  jerr.mgr.error_exit = JpegErrorExit;
  jerr.mgr.emit_message = JpegSilence;
  jerr.message[0] = '\0';
  if (setjmp(jerr.jump) != 0) {
    *error = jerr.message;
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  const int64_t w = cinfo.image_width, h = cinfo.image_height;
  if (w <= 0 || h <= 0 || w > lim.max_side || h > lim.max_side || w * h > lim.max_pixels) {
    std::snprintf(jerr.message, sizeof jerr.message, "size %lld x %lld", static_cast<long long>(w),
                  static_cast<long long>(h));
    jpeg_destroy_decompress(&cinfo);
    *error = std::string("\x01") + jerr.message;
    return false;
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    *error = "CMYK JPEG images are not supported (convert it to RGB)";
    return false;
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  img->width = static_cast<int>(cinfo.output_width);
  img->height = static_cast<int>(cinfo.output_height);
  img->rgb.resize(static_cast<size_t>(img->width) * img->height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img->rgb.data() + static_cast<size_t>(cinfo.output_scanline) * img->width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

RgbImage DecodeJpeg(std::string_view bytes, const ImageLimits& lim) {
  RgbImage img;
  std::string error;
  if (!DecodeJpegInto(bytes, lim, &img, &error)) {
    if (!error.empty() && error[0] == '\x01') {
      long long w = 0, h = 0;
      std::sscanf(error.c_str() + 1, "size %lld x %lld", &w, &h);
      CheckSize("JPEG", w, h, lim);
    }
    Fail("the JPEG image is truncated or corrupt: %s", error.c_str());
  }
  return img;
}

// ---- WebP ----
RgbImage DecodeWebp(std::string_view bytes, const ImageLimits& lim) {
  WebPBitstreamFeatures f;
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (WebPGetFeatures(data, bytes.size(), &f) != VP8_STATUS_OK)
    Fail("the WebP image is truncated or corrupt");
  if (f.has_animation) Fail("animated WebP images are not supported (send one frame)");
  CheckSize("WebP", f.width, f.height, lim);
  RgbImage img = Blank(f.width, f.height);
  if (WebPDecodeRGBInto(data, bytes.size(), img.rgb.data(), img.rgb.size(), img.width * 3) ==
      nullptr)
    Fail("the WebP image is truncated or corrupt");
  return img;
}

// ---- GIF (giflib, record by record: only the first frame is decoded) ----
struct GifSource {
  const uint8_t* p;
  size_t left;
};

int GifRead(GifFileType* gif, GifByteType* buf, int n) {
  auto* s = static_cast<GifSource*>(gif->UserData);
  const size_t k = std::min(s->left, static_cast<size_t>(std::max(n, 0)));
  std::memcpy(buf, s->p, k);
  s->p += k;
  s->left -= k;
  return static_cast<int>(k);
}

RgbImage DecodeGif(std::string_view bytes, const ImageLimits& lim) {
  GifSource src{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  int err = 0;
  GifFileType* gif = DGifOpen(&src, GifRead, &err);
  if (gif == nullptr) Fail("the GIF image is corrupt: %s", GifErrorString(err));
  struct Close {
    GifFileType* g;
    ~Close() {
      int e = 0;
      DGifCloseFile(g, &e);
    }
  } close{gif};
  CheckSize("GIF", gif->SWidth, gif->SHeight, lim);
  RgbImage img = Blank(gif->SWidth, gif->SHeight);
  const ColorMapObject* screen_map = gif->SColorMap;
  if (screen_map != nullptr && gif->SBackGroundColor < screen_map->ColorCount) {
    const GifColorType bg = screen_map->Colors[gif->SBackGroundColor];
    for (size_t i = 0; i < img.rgb.size(); i += 3) {
      img.rgb[i] = bg.Red;
      img.rgb[i + 1] = bg.Green;
      img.rgb[i + 2] = bg.Blue;
    }
  }
  int transparent = -1;
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR)
      Fail("the GIF image is truncated or corrupt: %s", GifErrorString(gif->Error));
    if (type == TERMINATE_RECORD_TYPE) Fail("the GIF image has no frame");
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif, &code, &ext) == GIF_ERROR)
        Fail("the GIF image is truncated or corrupt: %s", GifErrorString(gif->Error));
      if (code == GRAPHICS_EXT_FUNC_CODE && ext != nullptr && ext[0] >= 4 && (ext[1] & 1))
        transparent = ext[4];
      while (ext != nullptr) {
        if (DGifGetExtensionNext(gif, &ext) == GIF_ERROR)
          Fail("the GIF image is truncated or corrupt: %s", GifErrorString(gif->Error));
      }
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif) == GIF_ERROR)
      Fail("the GIF image is truncated or corrupt: %s", GifErrorString(gif->Error));
    const GifImageDesc& d = gif->Image;
    CheckSize("GIF frame", d.Width, d.Height, lim);
    const ColorMapObject* map = d.ColorMap != nullptr ? d.ColorMap : screen_map;
    if (map == nullptr) Fail("the GIF image has no color map");
    std::vector<GifPixelType> line(static_cast<size_t>(d.Width));
    std::vector<int> rows(static_cast<size_t>(d.Height));
    if (d.Interlace) {  // passes: every 8th row from 0, 8th from 4, 4th from 2, 2nd from 1
      int k = 0;
      for (const auto& [start, step] : {std::pair{0, 8}, {4, 8}, {2, 4}, {1, 2}})
        for (int y = start; y < d.Height; y += step) rows[static_cast<size_t>(k++)] = y;
    } else {
      for (int y = 0; y < d.Height; ++y) rows[static_cast<size_t>(y)] = y;
    }
    for (int i = 0; i < d.Height; ++i) {
      if (DGifGetLine(gif, line.data(), d.Width) == GIF_ERROR)
        Fail("the GIF image is truncated or corrupt: %s", GifErrorString(gif->Error));
      const int y = d.Top + rows[static_cast<size_t>(i)];
      if (y < 0 || y >= img.height) continue;
      for (int x = 0; x < d.Width; ++x) {
        const int c = line[static_cast<size_t>(x)];
        const int px = d.Left + x;
        if (c == transparent || c >= map->ColorCount || px < 0 || px >= img.width) continue;
        uint8_t* o = img.At(px, y);
        o[0] = map->Colors[c].Red;
        o[1] = map->Colors[c].Green;
        o[2] = map->Colors[c].Blue;
      }
    }
    return img;  // the first frame only
  }
}

// ---- resampling ----
float FilterWeight(ResizeFilter f, float x) {
  x = std::fabs(x);
  if (f == ResizeFilter::kTriangle) return x < 1 ? 1 - x : 0;
  if (x < 1) return (1.5f * x - 2.5f) * x * x + 1;  // Catmull-Rom (B = 0, C = 0.5)
  if (x < 2) return ((-0.5f * x + 2.5f) * x - 4) * x + 2;
  return 0;
}

// Per output index: the first source index and the weights (normalized).
struct Taps {
  std::vector<int> first, count;
  std::vector<float> w;
  int max_taps = 0;
};

Taps MakeTaps(int src, int dst, ResizeFilter f) {
  Taps t;
  const float scale = static_cast<float>(dst) / static_cast<float>(src);
  const float widen = scale < 1 ? 1 / scale : 1;  // the filter's reach in source pixels
  const float radius = (f == ResizeFilter::kTriangle ? 1.0f : 2.0f) * widen;
  t.max_taps = static_cast<int>(std::ceil(radius)) * 2 + 1;
  t.first.resize(static_cast<size_t>(dst));
  t.count.resize(static_cast<size_t>(dst));
  t.w.assign(static_cast<size_t>(dst) * t.max_taps, 0);
  for (int i = 0; i < dst; ++i) {
    const float center = (static_cast<float>(i) + 0.5f) / scale - 0.5f;
    const int lo = static_cast<int>(std::floor(center - radius)) + 1;
    float* w = &t.w[static_cast<size_t>(i) * t.max_taps];
    float sum = 0;
    int n = 0;
    for (int k = 0; k < t.max_taps; ++k) {
      const float v = FilterWeight(f, (static_cast<float>(lo + k) - center) / widen);
      w[k] = v;
      sum += v;
      n = k + 1;
    }
    for (int k = 0; k < n; ++k) w[k] = sum != 0 ? w[k] / sum : 0;
    t.first[static_cast<size_t>(i)] = lo;
    t.count[static_cast<size_t>(i)] = n;
  }
  return t;
}

uint8_t ToByte(float v) {
  return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
}

}  // namespace

RgbImage DecodeImage(std::string_view bytes, const ImageLimits& limits) {
  if (bytes.size() > limits.max_bytes)
    Fail("the image is %zu bytes; the limit is %zu", bytes.size(), limits.max_bytes);
  const auto starts = [&](std::string_view magic, size_t at = 0) {
    return bytes.size() >= at + magic.size() && bytes.substr(at, magic.size()) == magic;
  };
  if (starts("\x89PNG\r\n\x1a\n")) return DecodePng(bytes, limits);
  if (starts("\xff\xd8\xff")) return DecodeJpeg(bytes, limits);
  if (starts("RIFF") && starts("WEBP", 8)) return DecodeWebp(bytes, limits);
  if (starts("GIF87a") || starts("GIF89a")) return DecodeGif(bytes, limits);
  std::string lead;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i)
    lead += StrFormat("%s%02x", i > 0 ? " " : "", static_cast<unsigned char>(bytes[i]));
  Fail("not an image Paddock can read (PNG, JPEG, WebP or GIF): %zu bytes starting %s",
       bytes.size(), bytes.empty() ? "(nothing)" : lead.c_str());
}

std::string ImageBytesFromUrl(std::string_view url, size_t max_bytes) {
  const auto lower = [](std::string_view s) {
    std::string o(s);
    for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return o;
  };
  const std::string head = lower(url.substr(0, std::min<size_t>(url.size(), 8)));
  if (head.rfind("http://", 0) == 0 || head.rfind("https://", 0) == 0)
    Fail(
        "remote image URLs are not fetched (the server makes no network requests): send the "
        "image as a data: URL (data:image/png;base64,...)");
  if (head.rfind("data:", 0) != 0) {
    const size_t colon = url.find(':');
    Fail("image URL scheme '%s' is not supported: send a data: URL",
         std::string(url.substr(0, colon == std::string_view::npos ? 0 : colon)).c_str());
  }
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) Fail("the image data: URL has no ',' before its data");
  std::string meta = lower(url.substr(5, comma - 5));
  const bool base64 = meta.size() >= 7 && meta.compare(meta.size() - 7, 7, ";base64") == 0;
  if (base64) meta.resize(meta.size() - 7);
  const std::string type = meta.substr(0, meta.find(';'));
  if (!type.empty() && type.rfind("image/", 0) != 0)
    Fail("the data: URL holds '%s', not an image", type.c_str());
  if (!base64) Fail("the image data: URL must be base64 (data:image/png;base64,...)");
  return ImageBytesFromBase64(url.substr(comma + 1), max_bytes);
}

std::string ImageBytesFromBase64(std::string_view data, size_t max_bytes) {
  if (data.rfind("data:", 0) == 0) return ImageBytesFromUrl(data, max_bytes);
  if (data.size() / 4 * 3 > max_bytes + 3)
    Fail("the image is about %zu bytes; the limit is %zu", data.size() / 4 * 3, max_bytes);
  std::string out;
  if (!Base64Decode(data, &out)) Fail("the image data is not valid base64");
  return out;
}

uint64_t PixelHash(const RgbImage& img) {
  uint64_t h = 0xcbf29ce484222325ull ^
               (static_cast<uint64_t>(img.width) << 32 | static_cast<uint32_t>(img.height));
  const uint8_t* p = img.rgb.data();
  size_t n = img.rgb.size(), i = 0;
  for (; i + 8 <= n; i += 8) {  // 8 bytes a step, then a 64-bit mix
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    h = (h ^ v) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

RgbImage Resize(const RgbImage& src, int width, int height, ResizeFilter filter) {
  if (width <= 0 || height <= 0) Fail("resize to %d x %d", width, height);
  if (width == src.width && height == src.height) return src;
  const Taps tx = MakeTaps(src.width, width, filter), ty = MakeTaps(src.height, height, filter);
  // Horizontal pass into floats (src.height x width x 3), then vertical.
  std::vector<float> mid(static_cast<size_t>(src.height) * width * 3);
  for (int y = 0; y < src.height; ++y) {
    for (int x = 0; x < width; ++x) {
      const float* w = &tx.w[static_cast<size_t>(x) * tx.max_taps];
      float acc[3] = {0, 0, 0};
      for (int k = 0; k < tx.count[static_cast<size_t>(x)]; ++k) {
        if (w[k] == 0) continue;
        const int sx = std::clamp(tx.first[static_cast<size_t>(x)] + k, 0, src.width - 1);
        const uint8_t* s = src.At(sx, y);
        for (int c = 0; c < 3; ++c) acc[c] += w[k] * s[c];
      }
      float* m = &mid[(static_cast<size_t>(y) * width + x) * 3];
      for (int c = 0; c < 3; ++c) m[c] = acc[c];
    }
  }
  RgbImage out = Blank(width, height);
  for (int y = 0; y < height; ++y) {
    const float* w = &ty.w[static_cast<size_t>(y) * ty.max_taps];
    for (int x = 0; x < width; ++x) {
      float acc[3] = {0, 0, 0};
      for (int k = 0; k < ty.count[static_cast<size_t>(y)]; ++k) {
        if (w[k] == 0) continue;
        const int sy = std::clamp(ty.first[static_cast<size_t>(y)] + k, 0, src.height - 1);
        const float* m = &mid[(static_cast<size_t>(sy) * width + x) * 3];
        for (int c = 0; c < 3; ++c) acc[c] += w[k] * m[c];
      }
      uint8_t* o = out.At(x, y);
      for (int c = 0; c < 3; ++c) o[c] = ToByte(acc[c]);
    }
  }
  return out;
}

RgbImage ResizePadded(const RgbImage& src, int width, int height, const uint8_t pad[3],
                      ResizeFilter filter) {
  if (width == src.width && height == src.height) return src;
  const float scale = std::min(static_cast<float>(width) / static_cast<float>(src.width),
                               static_cast<float>(height) / static_cast<float>(src.height));
  const int w = std::max(1, std::min(static_cast<int>(std::ceil(src.width * scale)), width));
  const int h = std::max(1, std::min(static_cast<int>(std::ceil(src.height * scale)), height));
  const RgbImage inner = Resize(src, w, h, filter);
  RgbImage out = Blank(width, height);
  for (size_t i = 0; i < out.rgb.size(); i += 3) std::memcpy(&out.rgb[i], pad, 3);
  const int ox = (width - w) / 2, oy = (height - h) / 2;
  for (int y = 0; y < h; ++y)
    std::memcpy(out.At(ox, oy + y), inner.At(0, y), static_cast<size_t>(w) * 3);
  return out;
}

RgbImage Crop(const RgbImage& src, int x, int y, int width, int height) {
  if (x < 0 || y < 0 || width <= 0 || height <= 0 || x + width > src.width ||
      y + height > src.height)
    Fail("crop %d,%d %dx%d outside a %dx%d image", x, y, width, height, src.width, src.height);
  RgbImage out = Blank(width, height);
  for (int r = 0; r < height; ++r)
    std::memcpy(out.At(0, r), src.At(x, y + r), static_cast<size_t>(width) * 3);
  return out;
}

void Normalize(const RgbImage& img, const float mean[3], const float std[3], float* out) {
  const size_t plane = static_cast<size_t>(img.width) * img.height;
  for (size_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c)
      out[c * plane + i] = (static_cast<float>(img.rgb[i * 3 + c]) / 255.0f - mean[c]) / std[c];
}

}  // namespace paddock
