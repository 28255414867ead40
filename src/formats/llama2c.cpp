#include "formats/llama2c.h"

#include <cstring>

#include "base/mapped_file.h"
#include "base/strings.h"

namespace paddock {

namespace {
constexpr int32_t kMaxDim = 1 << 20;
constexpr uint32_t kMagicV1 = 0x616b3432;  // "ak42"
}  // namespace

Llama2cCheckpoint ParseLlama2c(const uint8_t* data, size_t size) {
  if (size < 4) Fail("llama2.c: file of %zu bytes is too small for a checkpoint header", size);
  uint32_t magic;
  std::memcpy(&magic, data, 4);
  if (magic == kMagicV1)
    Fail(
        "llama2.c: export version with magic 'ak42' is not supported (use the legacy v0 export or "
        "GGUF)");
  if (size < 28) Fail("llama2.c: file of %zu bytes is too small for a checkpoint header", size);
  int32_t h[7];
  std::memcpy(h, data, sizeof(h));
  Llama2cCheckpoint ck;
  Llama2cConfig& c = ck.config;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] < 0 ? (h[5] == INT32_MIN ? 0 : -h[5]) : h[5];
  c.seq_len = h[6];
  const struct {
    const char* name;
    int v;
  } fields[] = {{"dim", c.dim},         {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers},
                {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"vocab_size", c.vocab_size},
                {"seq_len", c.seq_len}};
  for (const auto& f : fields) {
    if (f.v <= 0 || f.v > kMaxDim)
      Fail("llama2.c: header field %s = %d is out of range (not a llama2.c checkpoint?)", f.name,
           f.v);
  }
  if (c.dim % c.n_heads != 0)
    Fail("llama2.c: dim %d is not divisible by n_heads %d", c.dim, c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    Fail("llama2.c: n_heads %d is not a multiple of n_kv_heads %d", c.n_heads, c.n_kv_heads);
  const int64_t head = c.dim / c.n_heads;
  const int64_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers, kv = c.n_kv_heads * head;

  size_t off = 28;
  auto take = [&](const std::string& name, int64_t cols, int64_t rows) {
    const uint64_t bytes = static_cast<uint64_t>(cols) * static_cast<uint64_t>(rows) * 4u;
    if (off > size || bytes > size - off)
      Fail("llama2.c: file truncated: tensor %s needs %llu bytes at offset %zu, file has %zu",
           name.c_str(), (unsigned long long)bytes, off, size);
    Llama2cTensor t;
    t.name = name;
    t.ne[0] = cols;
    t.ne[1] = rows;
    t.data = reinterpret_cast<const float*>(data + off);
    off += bytes;
    ck.tensors.push_back(std::move(t));
  };
  auto per_layer = [&](const char* suffix, int64_t cols, int64_t rows) {
    for (int64_t l = 0; l < L; ++l)
      take(StrFormat("blk.%lld.%s", (long long)l, suffix), cols, rows);
  };
  take("token_embd.weight", dim, c.vocab_size);
  per_layer("attn_norm.weight", dim, 1);
  per_layer("attn_q.weight", dim, dim);
  per_layer("attn_k.weight", dim, kv);
  per_layer("attn_v.weight", dim, kv);
  per_layer("attn_output.weight", dim, dim);
  per_layer("ffn_norm.weight", dim, 1);
  per_layer("ffn_gate.weight", dim, hid);  // w1
  per_layer("ffn_down.weight", hid, dim);  // w2
  per_layer("ffn_up.weight", dim, hid);    // w3
  take("output_norm.weight", dim, 1);
  // Skip the legacy RoPE tables (freq_cis_real, freq_cis_imag): seq_len * head / 2 each.
  const uint64_t rope_bytes = static_cast<uint64_t>(c.seq_len) * static_cast<uint64_t>(head) * 4u;
  if (!c.shared_classifier) {
    if (rope_bytes > size - off) Fail("llama2.c: file truncated in the RoPE tables");
    off += rope_bytes;
    take("output.weight", dim, c.vocab_size);
  }
  // Keep the row-major [rows][cols] order expected by the model layer; x86 is little-endian,
  // and llama2.c floats are 4-byte aligned after the 28-byte header.
  return ck;
}

Llama2cCheckpoint OpenLlama2c(const std::string& path, bool populate) {
  auto f = MappedFile::Open(path, populate);
  try {
    Llama2cCheckpoint ck = ParseLlama2c(f->data(), f->size());
    ck.file = std::move(f);
    return ck;
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

Llama2cVocab ParseLlama2cTokenizer(const uint8_t* data, size_t size) {
  Llama2cVocab v;
  if (size < 4) Fail("llama2.c tokenizer: file too small");
  int32_t max_len;
  std::memcpy(&max_len, data, 4);
  if (max_len <= 0 || max_len > 4096)
    Fail("llama2.c tokenizer: max_token_length %d is out of range (not a tokenizer.bin?)", max_len);
  v.max_token_length = max_len;
  size_t off = 4;
  while (off < size) {
    if (size - off < 8)
      Fail("llama2.c tokenizer: truncated entry %zu at offset %zu", v.pieces.size(), off);
    float score;
    int32_t len;
    std::memcpy(&score, data + off, 4);
    std::memcpy(&len, data + off + 4, 4);
    off += 8;
    if (len < 0 || len > max_len)
      Fail("llama2.c tokenizer: entry %zu has length %d (max %d)", v.pieces.size(), len, max_len);
    if (static_cast<size_t>(len) > size - off)
      Fail("llama2.c tokenizer: entry %zu is truncated", v.pieces.size());
    v.pieces.emplace_back(reinterpret_cast<const char*>(data + off), static_cast<size_t>(len));
    v.scores.push_back(score);
    off += static_cast<size_t>(len);
  }
  if (v.pieces.empty()) Fail("llama2.c tokenizer: no tokens");
  return v;
}

Llama2cVocab ReadLlama2cTokenizer(const std::string& path) {
  auto f = MappedFile::Open(path);
  try {
    return ParseLlama2cTokenizer(f->data(), f->size());
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace paddock
