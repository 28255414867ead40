// paddock quantize: rewrite a GGUF model with its weight matrices in another tensor type.
//
// Reads any GGUF Paddock can load (F32/F16/BF16 or already quantized: re-quantized from the
// dequantized values), copies the metadata, converts every 2-D `.weight` matrix whose rows fit
// the type's block to TYPE (others to a fallback that fits, norms and biases stay F32), and
// writes GGUF readable by llama.cpp too. Progress per tensor on stderr.
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "awq.h"
#include "base/cpu.h"
#include "base/strings.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "engine/calibration.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "model/weights.h"
#include "progress.h"

namespace paddock::cli {
namespace {

const std::vector<OptionSpec> kQuantSpecs = {
    {{"--type"},
     true,
     "target type (required): llama.cpp q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, "
     "q6_k, iq4_nl, iq4_xs, mxfp4, f16, bf16, "
     "f32; Paddock pq8_c (int8 per channel), pq4_g32, pq4_g64, pq4_g128 (int4 per group), "
     "pq4_g32z, pq4_g64z, pq4_g128z (with a zero point)"},
    {{"--keep"},
     true,
     "keep tensors whose name matches this glob in their input type (repeatable), e.g. '*attn_k*'",
     true},
    {{"--target-bpw"},
     true,
     "mixed precision: measure each matrix's sensitivity and keep the most sensitive ones in "
     "--wide-type until the file reaches this many bits per weight"},
    {{"--wide-type"}, true, "the wider type for sensitive matrices (default q8_0)"},
    {{"--calib"},
     true,
     "calibration text: activation statistics for the Paddock int4 types (activation-aware scales) "
     "and the sensitivity measurement of --target-bpw"},
    {{"--calib-ctx"}, true, "calibration window in tokens (default 128)"},
    {{"--calib-windows"},
     true,
     "calibration windows for the activation statistics (default 8; sensitivity uses 2)"},
    {{"--rtn"},
     false,
     "round to nearest: no activation statistics and no fitted k-quant scales (to measure "
     "calibration)"},
    {{"--sparsity"},
     true,
     "2:4: prune 2 of every 4 weights of --sparse-tensors (largest |w| x activation rms kept) and "
     "store them as PS8_C (2:4 sparse int8 per channel)"},
    {{"--sparse-tensors"}, true, "glob of the tensors to prune (default '*ffn_*')"},
    {{"--no-awq"},
     false,
     "no activation-aware per-channel scaling (statistics still weight the Paddock types' "
     "rounding)"},
    {{"-h", "--help"}, false, "show this help"},
};

// llama.cpp's general.file_type ids for a whole-file type (mostly-TYPE).
int FileType(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
      return 0;
    case GgmlType::kF16:
      return 1;
    case GgmlType::kQ4_0:
      return 2;
    case GgmlType::kQ4_1:
      return 3;
    case GgmlType::kQ8_0:
      return 7;
    case GgmlType::kQ5_0:
      return 8;
    case GgmlType::kQ5_1:
      return 9;
    case GgmlType::kQ4_K:
      return 15;
    case GgmlType::kQ5_K:
      return 17;
    case GgmlType::kQ6_K:
      return 18;
    case GgmlType::kBF16:
      return 32;
    case GgmlType::kQ2_K:
      return 10;
    case GgmlType::kQ3_K:
      return 12;  // Q3_K_M, the usual name for a mostly-Q3_K file
    case GgmlType::kIQ4_NL:
      return 25;
    case GgmlType::kIQ4_XS:
      return 30;
    case GgmlType::kMXFP4:
      return 38;
    default:
      return 0;
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

// The llama.cpp type closest to an interleaved Paddock type, for matrices it cannot hold (rows
// not a multiple of 16, the embedding table).
const TypeTraits* LlamaEquivalent(GgmlType t) {
  X16Format f{};
  X16FormatOf(t, &f);
  if (f.kind == X16Kind::kQ8C || f.kind == X16Kind::kQ8B) return &Traits(GgmlType::kQ8_0);
  return &Traits(f.kind == X16Kind::kQ4Z ? GgmlType::kQ4_1 : GgmlType::kQ4_0);
}

// The type a matrix `name` of `rows` x `cols` gets when `target` is asked for.
const TypeTraits* TypeFor(const TypeTraits* target, const std::string& name, int64_t rows,
                          int64_t cols);

// The type for rows of `cols` elements that do not fill `target`'s blocks: the closest that fits.
const TypeTraits* Fallback(const TypeTraits* target, int64_t cols) {
  if (cols % target->block_size == 0) return target;
  // IQ4_XS rows that do not fill its 256-element blocks: its 32-element sibling, same grid.
  if (target->type == GgmlType::kIQ4_XS && cols % 32 == 0) return &Traits(GgmlType::kIQ4_NL);
  if (cols % 32 == 0)
    return &Traits(target->type_size * 8 < 6 * target->block_size ? GgmlType::kQ5_0
                                                                  : GgmlType::kQ8_0);
  return &Traits(GgmlType::kF16);
}

const TypeTraits* TypeFor(const TypeTraits* target, const std::string& name, int64_t rows,
                          int64_t cols) {
  if (IsX16(target->type) &&
      (rows % kX16Rows != 0 || name == "token_embd.weight" || name == "position_embd.weight")) {
    target = LlamaEquivalent(target->type);
  }
  // Rows narrower than an int4 group: the same kind with the largest group that fits.
  static const GgmlType kSym[] = {GgmlType::kPQ4_G128, GgmlType::kPQ4_G64, GgmlType::kPQ4_G32};
  static const GgmlType kZ[] = {GgmlType::kPQ4_G128Z, GgmlType::kPQ4_G64Z, GgmlType::kPQ4_G32Z};
  for (const GgmlType* family : {kSym, kZ}) {
    const auto* it = std::find(family, family + 3, target->type);
    if (it == family + 3) continue;
    for (; it != family + 3 && cols % Traits(*it).block_size != 0; ++it) {
    }
    if (it != family + 3) target = &Traits(*it);
  }
  return Fallback(target, cols);
}

// Encodes a rows x cols float matrix as `type` over the threads: interleaved types with the
// activation statistics when given; Q4_K / Q5_K with fitted sub-block scales (weighted by the
// statistics when given) unless `rtn` (round to nearest: the reference encoder).
std::string EncodeMatrix(const TypeTraits& type, const float* f, int64_t rows, int64_t cols,
                         const float* importance, bool rtn) {
  std::string bytes(RowBytes(type, cols) * static_cast<uint64_t>(rows), '\0');
  const bool fitted = !rtn && HasFittedQuantizer(type.type);
  if (!IsX16(type.type) && !fitted) {
    type.from_float(f, bytes.data(), rows * cols);
    return bytes;
  }
  ThreadPool pool(PhysicalCores());
  const int64_t unit = IsX16(type.type) ? kX16Rows : 1;
  const size_t unit_bytes = static_cast<size_t>(unit) * RowBytes(type, cols);
  pool.ParallelFor(rows / unit, [&](int64_t b, int64_t e, int) {
    uint8_t* out = reinterpret_cast<uint8_t*>(bytes.data()) + static_cast<size_t>(b) * unit_bytes;
    if (fitted) {
      QuantizeRowsFitted(type.type, f + b * cols, e - b, cols, importance, out);
    } else {
      QuantizeX16(type.type, f + b * kX16Rows * cols, (e - b) * kX16Rows, cols, importance, out);
    }
  });
  return bytes;
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
      p->append(reinterpret_cast<const char*>(v.raw), v.count * GgufScalarSize(v.elem_type));
    }
    return true;
  }
  const size_t n = GgufScalarSize(v.type);
  if (v.type == GgufType::kF32) {
    Put<float>(p, static_cast<float>(v.f));
  } else if (v.type == GgufType::kF64) {
    Put<double>(p, v.f);
  } else if (v.IsInteger() && (v.type == GgufType::kI8 || v.type == GgufType::kI16 ||
                               v.type == GgufType::kI32 || v.type == GgufType::kI64)) {
    p->append(reinterpret_cast<const char*>(&v.i), n);  // little-endian low bytes
  } else {
    p->append(reinterpret_cast<const char*>(&v.u), n);
  }
  return true;
}

// One quantize run, as named steps over its state: the target types from the flags, the
// metadata copied, calibration, the mixed-precision and sparsity plans, AWQ scaling, then each
// tensor converted and written.
class QuantizeJob {
 public:
  explicit QuantizeJob(Args& args) : args_(args), rtn_(args.Has("--rtn")) {}

  int Run() {
    ParseTypes();
    g_ = std::make_unique<GgufFile>(GgufFile::Open(in_));
    CopyMetadata();
    Calibrate();
    PlanMixedPrecision();
    PlanSparsity();
    PlanAwqScaling();
    w_.SpillTo(out_ + ".part");  // converted tensors on disk as they come, not in memory
    WriteTensors();
    return 0;
  }

 private:
  void ParseTypes() {
    if (args_.positional().size() != 2)
      throw UsageError("quantize needs an input and an output file: IN.gguf OUT.gguf");
    if (!args_.Has("--type"))
      throw UsageError("quantize needs a target type: --type q4_0 (or q8_0, q4_k, ...)");
    in_ = args_.positional()[0];
    out_ = args_.positional()[1];
    if (in_ == out_)
      throw UsageError("quantize: the output must be a different file from the input");
    auto usable = [](const TypeTraits* t) {
      return t != nullptr && (t->from_float != nullptr || IsX16(t->type)) &&
             t->type != GgmlType::kQ4_0X16 && t->type != GgmlType::kQ8_0X16;
    };
    target_ = FindTypeTraitsByName(args_.Str("--type").c_str());
    if (!usable(target_))
      throw UsageError("quantize: unknown or unsupported type '" + args_.Str("--type") + "'");
    keep_ = args_.All("--keep");
    wide_ = FindTypeTraitsByName(args_.Str("--wide-type", "q8_0").c_str());
    if (!usable(wide_))
      throw UsageError("quantize: unknown --wide-type '" + args_.Str("--wide-type") + "'");
    if (args_.Has("--target-bpw") && !args_.Has("--calib"))
      throw UsageError("quantize: --target-bpw needs a calibration text: --calib FILE");
  }

  void CopyMetadata() {
    for (const auto& kv : g_->metadata()) {
      const std::string key(kv.key);
      if (key == "general.file_type" || key == "general.quantization_version" ||
          key == "paddock.quantization_version")
        continue;
      std::string payload;
      if (!Encode(kv.value, &payload)) {
        std::fprintf(stderr, "paddock: warning: metadata '%s' (a nested array) is not copied\n",
                     key.c_str());
        continue;
      }
      w_.SetRaw(key, kv.value.type, payload);
    }
    w_.SetU32("general.file_type", static_cast<uint32_t>(FileType(target_->type)));
    w_.SetU32("general.quantization_version", 2);
  }

  // Activation statistics (for the activation-aware types) and, with --target-bpw, the
  // sensitivity measurement of mixed precision.
  void Calibrate() {
    if (!args_.Has("--calib")) return;
    std::ifstream cf(args_.Str("--calib"), std::ios::binary);
    if (!cf) throw Error("cannot read calibration text '" + args_.Str("--calib") + "'");
    std::stringstream ss;
    ss << cf.rdbuf();
    const int ctx = static_cast<int>(args_.Int("--calib-ctx", 128, 16, 4096));
    if (!rtn_) {
      Calibration stats(in_, ss.str(), ctx,
                        static_cast<int>(args_.Int("--calib-windows", 8, 1, 1024)));
      importance_ = stats.ActivationStats();
      std::fprintf(stderr, "paddock: activation statistics from %s\n",
                   args_.Str("--calib").c_str());
    }
    if (args_.Has("--target-bpw")) sens_ = std::make_unique<Calibration>(in_, ss.str(), ctx, 2);
  }

  const float* ImportanceOf(const std::string& name) const {
    auto it = importance_.find(name);
    return it == importance_.end() ? nullptr : it->second.data();
  }
  // Kept as they are: vectors (norms, biases), mixture-of-experts routers (F32, as llama.cpp
  // keeps them: small, and routing is sensitive to them) and recurrent layers' convolution taps
  // (llama.cpp's convolution reads them as F32 only). Matrices and 3-D expert tensors (one
  // matrix per expert) are converted.
  bool Kept(const GgufTensor& t) const {
    bool kept = !((t.n_dims == 2 || t.n_dims == 3) && EndsWith(t.name, ".weight")) ||
                EndsWith(t.name, "ffn_gate_inp.weight") || EndsWith(t.name, "ssm_conv1d.weight") ||
                EndsWith(t.name, "shortconv.conv.weight");
    for (const auto& pat : keep_) kept = kept || fnmatch(pat.c_str(), t.name.c_str(), 0) == 0;
    return kept;
  }

  // Each matrix's sensitivity, then the most sensitive per extra bit go wide while the whole
  // file stays within --target-bpw.
  void PlanMixedPrecision() {
    if (sens_ == nullptr) return;
    const double target_bpw = args_.Float("--target-bpw", 0, 1, 32);
    struct Cand {
      std::string name;
      double kl;
      double extra_bits;
    };
    std::vector<Cand> cands;
    double total_bits = 0;
    int64_t total_elems = 0;
    for (const auto& t : g_->tensors()) {
      const bool kept = Kept(t);
      const int64_t rows = t.n_elements / t.ne[0];
      const TypeTraits* base = kept ? &Traits(t.type) : TypeFor(target_, t.name, rows, t.ne[0]);
      total_bits += 8.0 * static_cast<double>(RowBytes(*base, t.ne[0])) * static_cast<double>(rows);
      total_elems += t.n_elements;
      const TypeTraits* wt = TypeFor(wide_, t.name, rows, t.ne[0]);
      if (kept || base->type != TypeFor(target_, t.name, rows, t.ne[0])->type || wt == base)
        continue;
      const float* imp = ImportanceOf(t.name);
      const double kl = sens_->Sensitivity(t.name, [&](float* m, int64_t nr, int64_t nc) {
        const std::string q = EncodeMatrix(*base, m, nr, nc, imp, rtn_);
        DequantizeMatrix(base->type, reinterpret_cast<const uint8_t*>(q.data()), nr, nc, m);
      });
      if (kl < 0) continue;
      const double extra = 8.0 *
                           (static_cast<double>(RowBytes(*wt, t.ne[0])) -
                            static_cast<double>(RowBytes(*base, t.ne[0]))) *
                           static_cast<double>(rows);
      cands.push_back({t.name, kl, extra});
      std::fprintf(stderr, "sensitivity %-32s KL %.6f\n", t.name.c_str(), kl);
    }
    std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
      return a.kl / std::max(1.0, a.extra_bits) > b.kl / std::max(1.0, b.extra_bits);
    });
    const double budget = target_bpw * static_cast<double>(total_elems);
    for (const auto& c : cands) {
      if (total_bits + c.extra_bits <= budget) {
        total_bits += c.extra_bits;
        wide_for_[c.name] = wide_;
        std::fprintf(stderr, "keeping %s in %s (KL %.6f)\n", c.name.c_str(), wide_->name, c.kl);
      }
    }
  }

  void PlanSparsity() {
    if (!args_.Has("--sparsity")) return;
    if (args_.Str("--sparsity") != "2:4") throw UsageError("quantize: --sparsity supports 2:4");
    sparse_glob_ = args_.Str("--sparse-tensors", "*ffn_*");
  }

  // The type a tensor is written in (before --keep).
  const TypeTraits* DstType(const GgufTensor& t) {
    const int64_t rows = t.n_elements / t.ne[0];
    if (!sparse_glob_.empty() && fnmatch(sparse_glob_.c_str(), t.name.c_str(), 0) == 0 &&
        t.n_dims == 2 && EndsWith(t.name, ".weight") && rows % kX16Rows == 0 && t.ne[0] % 32 == 0 &&
        t.name != "token_embd.weight") {
      return &Traits(GgmlType::kPS8_C);
    }
    // An expert tensor's interleaved row groups must not straddle two experts: its rows per
    // expert decide.
    return TypeFor(wide_for_.count(t.name) ? wide_for_[t.name] : target_, t.name,
                   t.n_dims == 3 ? t.ne[1] : rows, t.ne[0]);
  }

  // Activation-aware per-channel scaling (folded into the norms / FFN-up rows).
  void PlanAwqScaling() {
    if (importance_.empty() || args_.Has("--no-awq")) return;
    std::map<std::string, const GgufTensor*> by_name;
    for (const auto& t : g_->tensors()) by_name[t.name] = &t;
    auto read = [&](const std::string& name, std::vector<float>* data, int64_t* rows,
                    int64_t* cols) {
      auto it = by_name.find(name);
      if (it == by_name.end()) return false;
      const GgufTensor& t = *it->second;
      *cols = t.ne[0];
      *rows = t.n_elements / t.ne[0];
      data->resize(static_cast<size_t>(t.n_elements));
      DequantizeMatrix(t.type, t.data, *rows, *cols, data->data());
      return true;
    };
    auto type_of = [&](const std::string& name, int64_t, int64_t) {
      const GgufTensor& t = *by_name.at(name);
      return Kept(t) ? GgmlType::kF32 : DstType(t)->type;  // kept: leave its group alone
    };
    const bool tied = by_name.count("output.weight") == 0;
    int n_layers = 0;
    while (by_name.count(StrFormat("blk.%d.attn_norm.weight", n_layers))) ++n_layers;
    awq_ = PlanAwq(n_layers, importance_, read, type_of, tied,
                   by_name.count("blk.0.ffn_gate.weight") > 0);
    for (const auto& line : awq_.log) std::fprintf(stderr, "%s\n", line.c_str());
  }

  // A matrix re-encoded as dst, with the AWQ row and column scales applied.
  void Convert(const GgufTensor& t, const TypeTraits& dst, const std::vector<int64_t>& ne) {
    const TypeTraits& src = Traits(t.type);
    if (src.to_float == nullptr && !IsX16(t.type))
      Fail("tensor '%s' has type %s, which cannot be converted", t.name.c_str(), src.name);
    const int64_t rows = t.n_elements / t.ne[0], cols = t.ne[0];
    buf_.resize(static_cast<size_t>(t.n_elements));
    DequantizeMatrix(t.type, t.data, rows, cols, buf_.data());
    const float* imp = ImportanceOf(t.name);
    std::vector<float> scaled_imp;
    if (auto it = awq_.row_div.find(t.name); it != awq_.row_div.end()) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c)
          buf_[static_cast<size_t>(r * cols + c)] /= it->second[static_cast<size_t>(r)];
      }
    }
    if (auto it = awq_.col.find(t.name); it != awq_.col.end()) {
      const auto& sc = it->second;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c)
          buf_[static_cast<size_t>(r * cols + c)] *= sc[static_cast<size_t>(c)];
      }
      if (imp != nullptr) {  // the scaled matrix reads x / s
        scaled_imp.resize(static_cast<size_t>(cols));
        for (int64_t c = 0; c < cols; ++c)
          scaled_imp[static_cast<size_t>(c)] =
              imp[c] / (sc[static_cast<size_t>(c)] * sc[static_cast<size_t>(c)]);
        imp = scaled_imp.data();
      }
    }
    const std::string bytes = EncodeMatrix(dst, buf_.data(), rows, cols, imp, rtn_);
    w_.AddTensor(t.name, ne, dst.type, bytes.data(), bytes.size());
  }

  void WriteTensors() {
    const auto& tensors = g_->tensors();
    uint64_t bytes_in = 0, bytes_out = 0;
    int64_t params = 0;
    bool paddock_types = false;
    Progress bar("quantize", static_cast<double>(tensors.size()), "tensors");
    for (size_t k = 0; k < tensors.size(); ++k) {
      const GgufTensor& t = tensors[k];
      const TypeTraits& src = Traits(t.type);
      std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
      const bool kept = Kept(t);
      const int64_t rows = t.n_elements / t.ne[0];
      const TypeTraits* dst = DstType(t);
      const bool transformed =
          awq_.col.count(t.name) || awq_.row_div.count(t.name) || awq_.vec_div.count(t.name);
      if (awq_.vec_div.count(t.name)) {  // a norm weight / bias absorbing 1 / s
        buf_.resize(static_cast<size_t>(t.n_elements));
        DequantizeMatrix(t.type, t.data, 1, t.n_elements, buf_.data());
        const auto& div = awq_.vec_div.at(t.name);
        for (size_t i = 0; i < buf_.size(); ++i) buf_[i] /= div[i % div.size()];
        w_.AddTensorF32(t.name, ne, GgmlType::kF32, buf_.data());
        dst = &Traits(GgmlType::kF32);
      } else if (!transformed && (kept || (dst->type == t.type))) {
        w_.AddTensor(t.name, ne, t.type, t.data, t.nbytes);
        dst = &src;
      } else {
        if (kept) dst = &src;  // (only reached when transformed)
        Convert(t, *dst, ne);
      }
      paddock_types = paddock_types || IsPaddockFileType(dst->type);
      const uint64_t nb = RowBytes(*dst, t.ne[0]) * static_cast<uint64_t>(rows);
      bytes_in += t.nbytes;
      bytes_out += nb;
      params += t.n_elements;
      bar.Update(static_cast<double>(k + 1));
      if (!bar.tty())  // a log keeps a line per tensor; a terminal shows the bar
        std::fprintf(stderr, "[%4zu/%4zu] %-32s %-9s -> %-9s %s -> %s%s\n", k + 1, tensors.size(),
                     t.name.c_str(), src.name, dst->name, FormatBytes(t.nbytes).c_str(),
                     FormatBytes(nb).c_str(),
                     ImportanceOf(t.name) != nullptr &&
                             (IsX16(dst->type) || (!rtn_ && HasFittedQuantizer(dst->type)))
                         ? " (activation-aware)"
                         : "");
    }
    bar.Finish();
    if (paddock_types) w_.SetU32("paddock.quantization_version", kPaddockQuantVersion);
    w_.Write(out_);
    std::fprintf(stderr, "paddock: wrote %s: %s -> %s, %.2f bits per weight\n", out_.c_str(),
                 FormatBytes(bytes_in).c_str(), FormatBytes(bytes_out).c_str(),
                 8.0 * static_cast<double>(bytes_out) / static_cast<double>(params));
  }

  Args& args_;
  const bool rtn_;
  std::string in_, out_;
  const TypeTraits* target_ = nullptr;
  const TypeTraits* wide_ = nullptr;
  std::vector<std::string> keep_;
  std::unique_ptr<GgufFile> g_;
  GgufWriter w_;
  std::unique_ptr<Calibration> sens_;
  std::map<std::string, std::vector<float>> importance_;
  std::map<std::string, const TypeTraits*> wide_for_;
  std::string sparse_glob_;
  AwqPlan awq_;
  std::vector<float> buf_;
};

}  // namespace

int CmdQuantize(int argc, char** argv) {
  Args args("quantize", kQuantSpecs, argc, argv);
  if (args.Has("-h")) {
    std::fputs(
        Usage("quantize", "IN.gguf OUT.gguf --type TYPE [--keep PATTERN]...", kQuantSpecs).c_str(),
        stdout);
    return 0;
  }
  return QuantizeJob(args).Run();
}

}  // namespace paddock::cli
