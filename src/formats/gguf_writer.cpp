#include "formats/gguf_writer.h"

#include <cstdio>
#include <cstring>

#include "base/strings.h"

namespace paddock {

namespace {
template <class T>
void Append(std::string* s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s->append(b, sizeof(T));
}
void AppendString(std::string* s, const std::string& v) {
  Append<uint64_t>(s, v.size());
  s->append(v);
}
}  // namespace

void GgufWriter::Put(const std::string& key, GgufType type, std::string payload) {
  for (auto& kv : kvs_) {
    if (kv.key == key) {
      kv.type = type;
      kv.payload = std::move(payload);
      return;
    }
  }
  kvs_.push_back({key, type, std::move(payload)});
}

void GgufWriter::SetU32(const std::string& k, uint32_t v) {
  std::string p;
  Append(&p, v);
  Put(k, GgufType::kU32, p);
}
void GgufWriter::SetI32(const std::string& k, int32_t v) {
  std::string p;
  Append(&p, v);
  Put(k, GgufType::kI32, p);
}
void GgufWriter::SetU64(const std::string& k, uint64_t v) {
  std::string p;
  Append(&p, v);
  Put(k, GgufType::kU64, p);
}
void GgufWriter::SetF32(const std::string& k, float v) {
  std::string p;
  Append(&p, v);
  Put(k, GgufType::kF32, p);
}
void GgufWriter::SetBool(const std::string& k, bool v) {
  std::string p;
  Append<uint8_t>(&p, v ? 1 : 0);
  Put(k, GgufType::kBool, p);
}
void GgufWriter::SetString(const std::string& k, const std::string& v) {
  std::string p;
  AppendString(&p, v);
  Put(k, GgufType::kString, p);
}
void GgufWriter::SetRaw(const std::string& k, GgufType type, const std::string& payload) {
  Put(k, type, payload);
}

void GgufWriter::SetStringArray(const std::string& k, const std::vector<std::string>& v) {
  std::string p;
  Append<uint32_t>(&p, static_cast<uint32_t>(GgufType::kString));
  Append<uint64_t>(&p, v.size());
  for (const auto& s : v) AppendString(&p, s);
  Put(k, GgufType::kArray, std::move(p));
}
void GgufWriter::SetF32Array(const std::string& k, const std::vector<float>& v) {
  std::string p;
  Append<uint32_t>(&p, static_cast<uint32_t>(GgufType::kF32));
  Append<uint64_t>(&p, v.size());
  for (float f : v) Append(&p, f);
  Put(k, GgufType::kArray, std::move(p));
}
void GgufWriter::SetI32Array(const std::string& k, const std::vector<int32_t>& v) {
  std::string p;
  Append<uint32_t>(&p, static_cast<uint32_t>(GgufType::kI32));
  Append<uint64_t>(&p, v.size());
  for (int32_t x : v) Append(&p, x);
  Put(k, GgufType::kArray, std::move(p));
}

void GgufWriter::SetBoolArray(const std::string& k, const std::vector<bool>& v) {
  std::string p;
  Append<uint32_t>(&p, static_cast<uint32_t>(GgufType::kBool));
  Append<uint64_t>(&p, v.size());
  for (bool x : v) Append<uint8_t>(&p, x ? 1 : 0);
  Put(k, GgufType::kArray, std::move(p));
}

void GgufWriter::AddTensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type,
                           const void* data, size_t nbytes) {
  const TypeTraits& tr = Traits(type);
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  if (ne.empty() || ne.size() > 4 || ne[0] % tr.block_size != 0)
    Fail("GgufWriter: bad shape for tensor '%s'", name.c_str());
  const uint64_t need = RowBytes(tr, ne[0]) * static_cast<uint64_t>(n / ne[0]);
  if (need != nbytes)
    Fail("GgufWriter: tensor '%s' has %zu bytes, its shape needs %llu", name.c_str(), nbytes,
         (unsigned long long)need);
  if (spill_ != nullptr) {
    static const char kZeros[64] = {};
    const size_t pad = (alignment_ - nbytes % alignment_) % alignment_;
    if (std::fwrite(data, 1, nbytes, spill_) != nbytes ||
        std::fwrite(kZeros, 1, pad, spill_) != pad)
      Fail("cannot write '%s' (disk full?)", spill_path_.c_str());
    tensors_.push_back({name, ne, type, std::string(), nbytes});
    return;
  }
  tensors_.push_back({name, ne, type, std::string(static_cast<const char*>(data), nbytes), nbytes});
}

GgufWriter::~GgufWriter() {
  if (spill_ != nullptr) {
    std::fclose(spill_);
    std::remove(spill_path_.c_str());
  }
}

void GgufWriter::SpillTo(const std::string& scratch_path) {
  if (!tensors_.empty() || spill_ != nullptr) Fail("GgufWriter: SpillTo before any tensor");
  if (alignment_ > 64) Fail("GgufWriter: spilling supports alignments up to 64");
  spill_ = std::fopen(scratch_path.c_str(), "w+b");
  if (spill_ == nullptr) Fail("cannot create '%s'", scratch_path.c_str());
  spill_path_ = scratch_path;
}

void GgufWriter::AddTensorF32(const std::string& name, const std::vector<int64_t>& ne,
                              GgmlType type, const float* data) {
  const TypeTraits& tr = Traits(type);
  if (tr.from_float == nullptr) Fail("GgufWriter: no quantizer for type %s", tr.name);
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  if (ne.empty() || ne[0] % tr.block_size != 0)
    Fail("GgufWriter: tensor '%s' row length is not a multiple of the %s block size", name.c_str(),
         tr.name);
  std::string bytes(RowBytes(tr, n), '\0');
  tr.from_float(data, bytes.data(), n);
  AddTensor(name, ne, type, bytes.data(), bytes.size());
}

std::string GgufWriter::Serialize() const {
  if (spill_ != nullptr) Fail("GgufWriter: a spilled writer is written with Write()");
  std::string out = Header();
  for (const auto& t : tensors_) {
    out.append(t.bytes);
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  }
  return out;
}

std::string GgufWriter::Header() const {
  std::string out;
  Append<uint32_t>(&out, 0x46554747);
  Append<uint32_t>(&out, 3);
  Append<uint64_t>(&out, tensors_.size());
  const bool custom_alignment = alignment_ != 32;
  Append<uint64_t>(&out, kvs_.size() + (custom_alignment ? 1 : 0));
  if (custom_alignment) {
    AppendString(&out, "general.alignment");
    Append<uint32_t>(&out, static_cast<uint32_t>(GgufType::kU32));
    Append<uint32_t>(&out, alignment_);
  }
  for (const auto& kv : kvs_) {
    AppendString(&out, kv.key);
    Append<uint32_t>(&out, static_cast<uint32_t>(kv.type));
    out.append(kv.payload);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    AppendString(&out, t.name);
    Append<uint32_t>(&out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Append<uint64_t>(&out, static_cast<uint64_t>(d));
    Append<uint32_t>(&out, static_cast<uint32_t>(t.type));
    Append<uint64_t>(&out, offset);
    offset += (t.size + alignment_ - 1) / alignment_ * alignment_;
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  return out;
}

void GgufWriter::Write(const std::string& path) const {
  if (spill_ == nullptr) {
    const std::string bytes = Serialize();
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) Fail("cannot create '%s'", path.c_str());
    const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
    const int rc = std::fclose(f);
    if (n != bytes.size() || rc != 0) Fail("cannot write '%s' (disk full?)", path.c_str());
    return;
  }
  // The header, then the spilled data copied over in large chunks.
  const std::string header = Header();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Fail("cannot create '%s'", path.c_str());
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fflush(spill_) == 0 && std::fseek(spill_, 0, SEEK_SET) == 0;
  std::vector<char> buf(size_t{64} << 20);
  while (ok) {
    const size_t got = std::fread(buf.data(), 1, buf.size(), spill_);
    if (got == 0) break;
    ok = std::fwrite(buf.data(), 1, got, f) == got;
  }
  ok = ok && std::ferror(spill_) == 0;
  if (std::fclose(f) != 0 || !ok) Fail("cannot write '%s' (disk full?)", path.c_str());
}

}  // namespace paddock
