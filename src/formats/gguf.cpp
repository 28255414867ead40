#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "base/mapped_file.h"
#include "base/strings.h"

namespace paddock {

const char* GgufTypeName(GgufType t) {
  static const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "unknown";
}

bool GgufValue::IsInteger() const {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

size_t GgufScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;

int ScalarSize(GgufType t) {
  return static_cast<int>(GgufScalarSize(t));
}

// Bounds-checked little-endian reader over the file bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  void Need(uint64_t n, const char* what) const {
    if (n > remaining()) {
      Fail("GGUF: file truncated at offset %zu: %s needs %llu bytes, %zu left", pos_, what,
           static_cast<unsigned long long>(n), remaining());
    }
  }
  template <class T>
  T Read(const char* what) {
    Need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view ReadString(const char* what) {
    const uint64_t n = Read<uint64_t>(what);
    Need(n, what);
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  const uint8_t* Skip(uint64_t n, const char* what) {
    Need(n, what);
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

GgufType ReadValueType(Cursor& c, std::string_view key) {
  const size_t at = c.pos();
  const uint32_t t = c.Read<uint32_t>("metadata value type");
  if (t > static_cast<uint32_t>(GgufType::kF64)) {
    Fail("GGUF: metadata key '%.*s' has unknown value type %u (offset %zu)",
         static_cast<int>(std::min<size_t>(key.size(), 80)), key.data(), t, at);
  }
  return static_cast<GgufType>(t);
}

void ReadScalar(Cursor& c, GgufType t, GgufValue* v) {
  switch (t) {
    case GgufType::kU8:
      v->u = c.Read<uint8_t>("u8 value");
      v->i = static_cast<int64_t>(v->u);
      break;
    case GgufType::kI8:
      v->i = c.Read<int8_t>("i8 value");
      break;
    case GgufType::kU16:
      v->u = c.Read<uint16_t>("u16 value");
      v->i = static_cast<int64_t>(v->u);
      break;
    case GgufType::kI16:
      v->i = c.Read<int16_t>("i16 value");
      break;
    case GgufType::kU32:
      v->u = c.Read<uint32_t>("u32 value");
      v->i = static_cast<int64_t>(v->u);
      break;
    case GgufType::kI32:
      v->i = c.Read<int32_t>("i32 value");
      break;
    case GgufType::kU64:
      v->u = c.Read<uint64_t>("u64 value");
      v->i = static_cast<int64_t>(v->u);
      break;
    case GgufType::kI64:
      v->i = c.Read<int64_t>("i64 value");
      break;
    case GgufType::kF32:
      v->f = c.Read<float>("f32 value");
      break;
    case GgufType::kF64:
      v->f = c.Read<double>("f64 value");
      break;
    case GgufType::kBool: {
      const uint8_t b = c.Read<uint8_t>("bool value");
      if (b > 1) Fail("GGUF: bool value %u is neither 0 nor 1 (offset %zu)", b, c.pos() - 1);
      v->u = b;
      v->i = b;  // (a bool array converts to numbers like the integer ones)
      break;
    }
    default:
      break;
  }
  if (t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64) {
    v->u = static_cast<uint64_t>(v->i);
  }
}

// Validates and skips an array body (used for nested arrays, which nothing reads).
void SkipArray(Cursor& c, std::string_view key, int depth) {
  if (depth > kMaxArrayDepth)
    Fail("GGUF: arrays nested too deeply under key '%.*s'", (int)std::min<size_t>(key.size(), 80),
         key.data());
  const GgufType et = ReadValueType(c, key);
  const uint64_t n = c.Read<uint64_t>("array length");
  if (et == GgufType::kString || et == GgufType::kArray) {
    const uint64_t min_elem = et == GgufType::kString ? 8 : 12;
    if (n > c.remaining() / min_elem)
      Fail("GGUF: array length %llu under key '%.*s' exceeds the file size", (unsigned long long)n,
           (int)std::min<size_t>(key.size(), 80), key.data());
    for (uint64_t k = 0; k < n; ++k) {
      if (et == GgufType::kString)
        c.ReadString("array string");
      else
        SkipArray(c, key, depth + 1);
    }
    return;
  }
  const int es = ScalarSize(et);
  if (n > c.remaining() / static_cast<uint64_t>(es))
    Fail("GGUF: array length %llu under key '%.*s' exceeds the file size", (unsigned long long)n,
         (int)std::min<size_t>(key.size(), 80), key.data());
  c.Skip(n * static_cast<uint64_t>(es), "array data");
}

void ReadValue(Cursor& c, std::string_view key, GgufValue* v) {
  v->type = ReadValueType(c, key);
  if (v->type == GgufType::kString) {
    v->str = c.ReadString("string value");
    return;
  }
  if (v->type != GgufType::kArray) {
    ReadScalar(c, v->type, v);
    return;
  }
  const size_t at = c.pos();
  v->elem_type = ReadValueType(c, key);
  v->count = c.Read<uint64_t>("array length");
  const int k = static_cast<int>(std::min<size_t>(key.size(), 80));
  if (v->elem_type == GgufType::kString) {
    if (v->count > c.remaining() / 8)
      Fail("GGUF: array '%.*s' claims %llu strings, more than the file can hold (offset %zu)", k,
           key.data(), (unsigned long long)v->count, at);
    v->strings.reserve(static_cast<size_t>(v->count));
    for (uint64_t j = 0; j < v->count; ++j) v->strings.push_back(c.ReadString("array string"));
  } else if (v->elem_type == GgufType::kArray) {
    if (v->count > c.remaining() / 12)
      Fail("GGUF: array '%.*s' claims %llu arrays, more than the file can hold (offset %zu)", k,
           key.data(), (unsigned long long)v->count, at);
    for (uint64_t j = 0; j < v->count; ++j) SkipArray(c, key, 1);
  } else {
    const uint64_t es = static_cast<uint64_t>(ScalarSize(v->elem_type));
    if (v->count > c.remaining() / es)
      Fail("GGUF: array '%.*s' claims %llu elements, more than the file can hold (offset %zu)", k,
           key.data(), (unsigned long long)v->count, at);
    v->raw = c.Skip(v->count * es, "array data");
  }
}

}  // namespace

GgufFile GgufFile::Open(const std::string& path, bool populate) {
  auto file = MappedFile::Open(path, populate);
  try {
    GgufFile g = Parse(file->data(), file->size());
    g.file_ = std::move(file);
    return g;
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

namespace {

// One tensor's header entry: name (unique), dimensions, type, byte size, aligned offset.
GgufTensor ReadTensorInfo(Cursor& c, uint64_t alignment,
                          std::unordered_set<std::string_view>* names) {
  GgufTensor ti;
  const std::string_view name = c.ReadString("tensor name");
  if (name.size() > 1024) Fail("GGUF: tensor name of %zu bytes is too long", name.size());
  ti.name.assign(name);
  const int nm = static_cast<int>(name.size());
  if (!names->insert(name).second) Fail("GGUF: duplicate tensor name '%.*s'", nm, name.data());
  const uint32_t n_dims = c.Read<uint32_t>("tensor dimension count");
  if (n_dims == 0 || n_dims > kMaxDims)
    Fail("GGUF: tensor '%.*s' has %u dimensions (1 to %d allowed)", nm, name.data(), n_dims,
         kMaxDims);
  ti.n_dims = static_cast<int>(n_dims);
  int64_t n_el = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne = c.Read<uint64_t>("tensor dimension");
    if (ne == 0 || ne > static_cast<uint64_t>(INT64_MAX))
      Fail("GGUF: tensor '%.*s' dimension %u has invalid size %llu", nm, name.data(), d,
           (unsigned long long)ne);
    ti.ne[d] = static_cast<int64_t>(ne);
    if (__builtin_mul_overflow(n_el, ti.ne[d], &n_el))
      Fail("GGUF: tensor '%.*s' element count overflows", nm, name.data());
  }
  ti.n_elements = n_el;
  const uint32_t type = c.Read<uint32_t>("tensor type");
  const TypeTraits* tr = FindTypeTraits(type);
  if (tr == nullptr) Fail("GGUF: tensor '%.*s' has unknown type id %u", nm, name.data(), type);
  ti.type = tr->type;
  if (ti.ne[0] % tr->block_size != 0)
    Fail("GGUF: tensor '%.*s' row length %lld is not a multiple of the %s block size %d", nm,
         name.data(), (long long)ti.ne[0], tr->name, tr->block_size);
  const uint64_t blocks = static_cast<uint64_t>(n_el / tr->block_size);
  if (blocks > UINT64_MAX / static_cast<uint64_t>(tr->type_size))
    Fail("GGUF: tensor '%.*s' byte size overflows", nm, name.data());
  ti.nbytes = blocks * static_cast<uint64_t>(tr->type_size);
  if (tr->row_extra > 0)
    ti.nbytes += static_cast<uint64_t>(n_el / ti.ne[0]) *
                 static_cast<uint64_t>(tr->row_extra);  // per-row scales
  ti.offset = c.Read<uint64_t>("tensor offset");
  if (ti.offset % alignment != 0)
    Fail("GGUF: tensor '%.*s' offset %llu is not aligned to %llu", nm, name.data(),
         (unsigned long long)ti.offset, (unsigned long long)alignment);
  return ti;
}

// Every tensor's bytes inside the data section (which starts at data_offset), pointed to; no two
// tensors sharing bytes.
void PlaceTensors(std::vector<GgufTensor>* tensors, const uint8_t* data, size_t size,
                  uint64_t data_offset) {
  const uint64_t data_size = data_offset <= size ? size - data_offset : 0;
  for (auto& ti : *tensors) {
    if (ti.offset > data_size || ti.nbytes > data_size - ti.offset) {
      Fail(
          "GGUF: tensor '%s' data [%llu, +%llu) lies past the end of the file (data section holds "
          "%llu bytes)",
          ti.name.c_str(), (unsigned long long)ti.offset, (unsigned long long)ti.nbytes,
          (unsigned long long)data_size);
    }
    ti.data = data + data_offset + ti.offset;
  }
  std::vector<const GgufTensor*> by_offset;
  by_offset.reserve(tensors->size());
  for (const auto& t : *tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor* a = by_offset[i - 1];
    const GgufTensor* b = by_offset[i];
    if (a->offset + a->nbytes > b->offset)
      Fail("GGUF: tensors '%s' and '%s' overlap", a->name.c_str(), b->name.c_str());
  }
}

}  // namespace

GgufFile GgufFile::Parse(const uint8_t* data, size_t size) {
  GgufFile g;
  g.size_ = size;
  Cursor c(data, size);
  if (size < 4) Fail("GGUF: file is %zu bytes, too small to be a GGUF file", size);
  const uint32_t magic = c.Read<uint32_t>("magic");
  if (magic != kMagic) Fail("GGUF: bad magic 0x%08x: not a GGUF file", magic);
  g.version_ = c.Read<uint32_t>("version");
  if (g.version_ == 1) Fail("GGUF: version 1 files are not supported (re-convert to v3)");
  if (g.version_ != 2 && g.version_ != 3)
    Fail("GGUF: unsupported version %u (supported: 2, 3)", g.version_);
  const uint64_t n_tensors = c.Read<uint64_t>("tensor count");
  const uint64_t n_kv = c.Read<uint64_t>("metadata count");
  if (n_tensors > c.remaining() / 32)
    Fail("GGUF: tensor count %llu is impossible for a file of %zu bytes",
         (unsigned long long)n_tensors, size);
  if (n_kv > c.remaining() / 13)
    Fail("GGUF: metadata count %llu is impossible for a file of %zu bytes",
         (unsigned long long)n_kv, size);

  g.kvs_.reserve(static_cast<size_t>(n_kv));
  std::unordered_set<std::string_view> keys;
  for (uint64_t k = 0; k < n_kv; ++k) {
    GgufKv kv;
    kv.key = c.ReadString("metadata key");
    if (!keys.insert(kv.key).second)
      Fail("GGUF: duplicate metadata key '%.*s'", (int)std::min<size_t>(kv.key.size(), 80),
           kv.key.data());
    ReadValue(c, kv.key, &kv.value);
    g.kvs_.push_back(std::move(kv));
  }

  if (const GgufValue* a = g.Find("general.alignment")) {
    if (a->type != GgufType::kU32)
      Fail("GGUF: general.alignment must be u32, found %s", GgufTypeName(a->type));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      Fail("GGUF: general.alignment %llu is not a power of two", (unsigned long long)a->u);
    g.alignment_ = a->u;
  }

  g.tensors_.reserve(static_cast<size_t>(n_tensors));
  std::unordered_set<std::string_view> names;
  for (uint64_t t = 0; t < n_tensors; ++t)
    g.tensors_.push_back(ReadTensorInfo(c, g.alignment_, &names));

  // The data section starts at the next alignment boundary after the header.
  const uint64_t header_end = c.pos();
  g.data_offset_ = (header_end + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  if (!g.tensors_.empty() && g.data_offset_ > size)
    Fail("GGUF: data section starts at %llu, past the end of the file (%zu bytes)",
         (unsigned long long)g.data_offset_, size);
  PlaceTensors(&g.tensors_, data, size, g.data_offset_);
  return g;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  for (const auto& kv : kvs_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

static void WrongType(std::string_view key, const GgufValue& v, const char* want) {
  Fail("GGUF: metadata '%.*s' has type %s, expected %s", (int)key.size(), key.data(),
       GgufTypeName(v.type), want);
}

std::optional<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->IsInteger()) WrongType(key, *v, "an integer");
  if (v->type == GgufType::kU64 && v->u > static_cast<uint64_t>(INT64_MAX))
    Fail("GGUF: metadata '%.*s' value is out of range", (int)key.size(), key.data());
  return v->i;
}

std::optional<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (v->IsFloat()) return v->f;
  if (v->IsInteger()) return static_cast<double>(v->i);
  WrongType(key, *v, "a number");
  return std::nullopt;
}

std::optional<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::kBool) WrongType(key, *v, "bool");
  return v->u != 0;
}

std::optional<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::kString) WrongType(key, *v, "string");
  return v->str;
}

template <class T>
static std::vector<T> ConvertArray(const GgufValue& v) {
  std::vector<T> out(static_cast<size_t>(v.count));
  const int es = ScalarSize(v.elem_type);
  for (size_t j = 0; j < out.size(); ++j) {
    const uint8_t* p = v.raw + j * static_cast<size_t>(es);
    GgufValue s;
    Cursor c(p, static_cast<size_t>(es));
    ReadScalar(c, v.elem_type, &s);
    if (v.elem_type == GgufType::kF32 || v.elem_type == GgufType::kF64)
      out[j] = static_cast<T>(s.f);
    else
      out[j] = static_cast<T>(s.i);
  }
  return out;
}

std::vector<float> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return {};
  if (v->type != GgufType::kArray || ScalarSize(v->elem_type) == 0)
    WrongType(key, *v, "a numeric array");
  return ConvertArray<float>(*v);
}

std::vector<int64_t> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return {};
  if (v->type != GgufType::kArray || ScalarSize(v->elem_type) == 0)
    WrongType(key, *v, "a numeric array");
  return ConvertArray<int64_t>(*v);
}

const std::vector<std::string_view>* GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return nullptr;
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString)
    WrongType(key, *v, "an array of strings");
  return &v->strings;
}

}  // namespace paddock
