// formats/gguf.h: GGUF v2/v3 reader, memory-mapped and zero-copy.
//
// Parsing validates everything a hostile file could get wrong (magic, version, counts, string
// and array lengths, tensor dims/types/offsets/sizes, alignment, overlaps) before anything is
// allocated in proportion to a count read from the file; each failure is one Error naming the
// problem and its byte offset. Tensor data is never copied: views point into the mapping.
// Does not interpret metadata: model configuration lives in the model layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/ggml_types.h"

namespace paddock {

class MappedFile;

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* GgufTypeName(GgufType t);

// Bytes of one scalar of type t (0 for strings and arrays).
size_t GgufScalarSize(GgufType t);

struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t u = 0;  // unsigned scalars and bool
  int64_t i = 0;   // signed scalars
  double f = 0;    // float scalars
  std::string_view str;
  // Arrays: element type and count; numeric elements stay in the file (`raw`),
  // string elements are indexed in `strings`. Nested arrays are validated and skipped.
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;
  std::vector<std::string_view> strings;

  bool IsInteger() const;
  bool IsFloat() const { return type == GgufType::kF32 || type == GgufType::kF64; }
};

struct GgufKv {
  std::string_view key;
  GgufValue value;
};

struct GgufTensor {
  std::string name;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
  int64_t n_elements = 0;
  const uint8_t* data = nullptr;  // points into the mapping
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws Error.
  // populate: as MappedFile::Open's.
  static GgufFile Open(const std::string& path, bool populate = true);
  // Parses a buffer the caller keeps alive (tests, fuzzing). Throws Error.
  static GgufFile Parse(const uint8_t* data, size_t size);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  const GgufValue* Find(std::string_view key) const;
  const GgufTensor* FindTensor(std::string_view name) const;

  // Typed look-ups: nullopt if absent; Error if present with an incompatible type.
  std::optional<int64_t> GetInt(std::string_view key) const;
  std::optional<double> GetFloat(std::string_view key) const;  // accepts integers too
  std::optional<bool> GetBool(std::string_view key) const;
  std::optional<std::string_view> GetString(std::string_view key) const;
  // Numeric arrays converted element by element; Error on a non-numeric array.
  std::vector<float> GetFloatArray(std::string_view key) const;
  std::vector<int64_t> GetIntArray(std::string_view key) const;
  // String arrays; null if absent; Error if not an array of strings.
  const std::vector<std::string_view>* GetStringArray(std::string_view key) const;

 private:
  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t size_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensor> tensors_;
};

}  // namespace paddock
