// paddock quantize: rewrite a GGUF model with its weight matrices in another tensor type.
//
// Reads any GGUF Paddock can load (F32/F16/BF16 or already quantized: re-quantized from the
// dequantized values), copies the metadata, converts every 2-D `.weight` matrix whose rows fit
// the type's block to TYPE (others to a fallback that fits, norms and biases stay F32), and
// writes GGUF readable by llama.cpp too. Progress per tensor on stderr.
#include <fnmatch.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "args.h"
#include "base/strings.h"
#include "commands.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"

namespace paddock::cli {
namespace {

const std::vector<OptionSpec> kQuantSpecs = {
    {{"--type"}, true, "target type: q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, f16, bf16, f32 (required)"},
    {{"--keep"}, true, "keep tensors whose name matches this glob in their input type (repeatable), e.g. '*attn_k*'", true},
    {{"-h", "--help"}, false, "show this help"},
};

// llama.cpp's general.file_type ids for a whole-file type (mostly-TYPE).
int FileType(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kQ4_1: return 3;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kQ5_0: return 8;
    case GgmlType::kQ5_1: return 9;
    case GgmlType::kQ4_K: return 15;
    case GgmlType::kQ5_K: return 17;
    case GgmlType::kQ6_K: return 18;
    case GgmlType::kBF16: return 32;
    default: return 0;
  }
}

size_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    default: return 0;
  }
}

template <class T>
void Put(std::string* p, T v) {
  p->append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void PutString(std::string* p, std::string_view s) {
  Put<uint64_t>(p, s.size());
  p->append(s.data(), s.size());
}

// Re-encodes a metadata value as GGUF payload; false for nested arrays (not copied).
bool Encode(const GgufValue& v, std::string* p) {
  if (v.type == GgufType::kString) {
    PutString(p, v.str);
    return true;
  }
  if (v.type == GgufType::kArray) {
    if (v.elem_type == GgufType::kArray) return false;
    Put<uint32_t>(p, static_cast<uint32_t>(v.elem_type));
    Put<uint64_t>(p, v.count);
    if (v.elem_type == GgufType::kString) {
      for (auto s : v.strings) PutString(p, s);
    } else {
      p->append(reinterpret_cast<const char*>(v.raw), v.count * ScalarSize(v.elem_type));
    }
    return true;
  }
  const size_t n = ScalarSize(v.type);
  if (v.type == GgufType::kF32) {
    Put<float>(p, static_cast<float>(v.f));
  } else if (v.type == GgufType::kF64) {
    Put<double>(p, v.f);
  } else if (v.IsInteger() && (v.type == GgufType::kI8 || v.type == GgufType::kI16 || v.type == GgufType::kI32 || v.type == GgufType::kI64)) {
    p->append(reinterpret_cast<const char*>(&v.i), n);  // little-endian low bytes
  } else {
    p->append(reinterpret_cast<const char*>(&v.u), n);
  }
  return true;
}

}  // namespace

int CmdQuantize(int argc, char** argv) {
  Args args("quantize", kQuantSpecs, argc, argv);
  if (args.Has("-h")) {
    std::fputs(Usage("quantize", "IN.gguf OUT.gguf --type TYPE [--keep PATTERN]...", kQuantSpecs).c_str(), stdout);
    return 0;
  }
  if (args.positional().size() != 2) throw UsageError("quantize needs an input and an output file: IN.gguf OUT.gguf");
  if (!args.Has("--type")) throw UsageError("quantize needs a target type: --type q4_0 (or q8_0, q4_k, ...)");
  const std::string in = args.positional()[0], out = args.positional()[1];
  if (in == out) throw UsageError("quantize: the output must be a different file from the input");
  const std::string tname = args.Str("--type");
  const TypeTraits* target = FindTypeTraitsByName(tname.c_str());
  if (target == nullptr || target->from_float == nullptr) throw UsageError("quantize: unknown or unsupported type '" + args.Str("--type") + "'");
  const std::vector<std::string> keep = args.All("--keep");

  const GgufFile g = GgufFile::Open(in);
  GgufWriter w;
  for (const auto& kv : g.metadata()) {
    const std::string key(kv.key);
    if (key == "general.file_type" || key == "general.quantization_version") continue;
    std::string payload;
    if (!Encode(kv.value, &payload)) {
      std::fprintf(stderr, "paddock: warning: metadata '%s' (a nested array) is not copied\n", key.c_str());
      continue;
    }
    w.SetRaw(key, kv.value.type, payload);
  }
  w.SetU32("general.file_type", static_cast<uint32_t>(FileType(target->type)));
  w.SetU32("general.quantization_version", 2);

  const auto& tensors = g.tensors();
  uint64_t bytes_in = 0, bytes_out = 0;
  int64_t params = 0;
  std::vector<float> buf;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const GgufTensor& t = tensors[k];
    const TypeTraits& src = Traits(t.type);
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    const bool matrix = t.n_dims == 2 && EndsWith(t.name, ".weight");
    bool kept = !matrix;
    for (const auto& pat : keep) kept = kept || fnmatch(pat.c_str(), t.name.c_str(), 0) == 0;
    const TypeTraits* dst = target;
    if (!kept && t.ne[0] % dst->block_size != 0) {
      // Rows that do not fill the type's blocks: the closest type that fits.
      dst = t.ne[0] % 32 == 0 ? &Traits(target->type_size * 8 < 6 * target->block_size ? GgmlType::kQ5_0 : GgmlType::kQ8_0) : &Traits(GgmlType::kF16);
    }
    if (kept || (dst->type == t.type)) {
      w.AddTensor(t.name, ne, t.type, t.data, t.nbytes);
      dst = &src;
    } else {
      if (src.to_float == nullptr) Fail("tensor '%s' has type %s, which cannot be converted", t.name.c_str(), src.name);
      buf.resize(static_cast<size_t>(t.n_elements));
      const size_t rows = static_cast<size_t>(t.n_elements / t.ne[0]);
      const size_t rb = RowBytes(src, t.ne[0]);
      for (size_t r = 0; r < rows; ++r) src.to_float(t.data + r * rb, buf.data() + r * static_cast<size_t>(t.ne[0]), t.ne[0]);
      w.AddTensorF32(t.name, ne, dst->type, buf.data());
    }
    const uint64_t nb = RowBytes(*dst, t.ne[0]) * static_cast<uint64_t>(t.n_elements / t.ne[0]);
    bytes_in += t.nbytes;
    bytes_out += nb;
    params += t.n_elements;
    std::fprintf(stderr, "[%4zu/%4zu] %-32s %-5s -> %-5s %s -> %s\n", k + 1, tensors.size(), t.name.c_str(), src.name, dst->name,
                 FormatBytes(t.nbytes).c_str(), FormatBytes(nb).c_str());
  }
  w.Write(out);
  std::fprintf(stderr, "paddock: wrote %s: %s -> %s, %.2f bits per weight\n", out.c_str(), FormatBytes(bytes_in).c_str(),
               FormatBytes(bytes_out).c_str(), 8.0 * static_cast<double>(bytes_out) / static_cast<double>(params));
  return 0;
}

}  // namespace paddock::cli
