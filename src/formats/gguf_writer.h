// formats/gguf_writer.h: builds GGUF v3 files (tests, synthetic models, the quantizer).
//
// Metadata and tensors are collected in memory, then Write() emits header, metadata, tensor
// infos, padding and aligned tensor data in one pass. Tensor bytes are copied in, or, after
// SpillTo(), appended to a scratch file as they come (files larger than memory: a 30B model's
// tensors), which Write() streams after the header and removes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/ggml_types.h"
#include "formats/gguf.h"

namespace paddock {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {}
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;
  // Tensor data from now on goes to `scratch_path` (created), not memory; before any tensor.
  void SpillTo(const std::string& scratch_path);

  void SetU32(const std::string& key, uint32_t v);
  void SetI32(const std::string& key, int32_t v);
  void SetU64(const std::string& key, uint64_t v);
  void SetF32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetString(const std::string& key, const std::string& v);
  void SetStringArray(const std::string& key, const std::vector<std::string>& v);
  void SetF32Array(const std::string& key, const std::vector<float>& v);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& v);
  void SetBoolArray(const std::string& key, const std::vector<bool>& v);
  // Raw escape hatch: a value already encoded (type id + payload), for tests of odd types.
  void SetRaw(const std::string& key, GgufType type, const std::string& payload);

  // ne[0] is the row length. `data` holds the tensor in `type`'s encoding.
  void AddTensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type,
                 const void* data, size_t nbytes);
  // Quantizes float data with the reference quantizer of `type`.
  void AddTensorF32(const std::string& name, const std::vector<int64_t>& ne, GgmlType type,
                    const float* data);

  // The whole file as bytes.
  std::string Serialize() const;
  // Writes to `path`; throws Error on I/O failure.
  void Write(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    GgufType type;
    std::string payload;
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    std::string bytes;  // empty when spilled
    uint64_t size = 0;
  };
  void Put(const std::string& key, GgufType type, std::string payload);
  // Everything before the tensor data (padded to the alignment).
  std::string Header() const;

  uint32_t alignment_;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
  std::FILE* spill_ = nullptr;
  std::string spill_path_;
};

}  // namespace paddock
