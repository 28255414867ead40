// engine/mtp.cpp: drafts from the model's own multi-token-prediction block (--spec mtp).
//
// The block runs as a one-layer model of its own (MtpBlockConfig) on a CPU Transformer over
// the target's weights: its layer is the file's prediction layer, its head the target's (or
// the block's own), and its input rows, given as embeddings, are eh_proj of the token's
// normalized embedding beside the normalized hidden state before it (llama.cpp's qwen35
// graph_mtp; the pairing (token p, hidden p - 1) and the zero state before position 0 are its
// draft-mtp's).
#include <algorithm>
#include <cstring>

#include "base/thread_pool.h"
#include "cpu/transformer.h"
#include "engine/engine_impl.h"  // PrefetchOf
#include "engine/speculative.h"
#include "kernels/kernels.h"
#include "kv/kv_manager.h"
#include "model/weights.h"

namespace paddock {

namespace {

constexpr int kMtpRows = 64;  // the block's tokens per step

// The target's first prediction block; Error when it has none.
const MtpWeights& BlockOf(const LoadedModel& t) {
  if (t.weights.mtp.empty())
    Fail(
        "--spec mtp: %s has no multi-token-prediction layers (its metadata gives no "
        "nextn_predict_layers)",
        t.path.c_str());
  return t.weights.mtp[0];
}

// The block as a model: the target's globals, the prediction layer, the head's norm and head.
std::unique_ptr<LoadedModel> BlockModel(const LoadedModel& t) {
  const MtpWeights& w = BlockOf(t);
  auto m = std::make_unique<LoadedModel>();
  m->path = t.path + " (prediction layer)";
  m->format = t.format;
  m->config = MtpBlockConfig(t.config);
  m->weights = t.weights;
  m->weights.mtp.clear();
  m->weights.layers.assign(1, w.layer);
  if (w.head) m->weights.output = w.head;
  if (w.head_norm != nullptr) m->weights.output_norm = w.head_norm;
  m->ops = LayerOps(m->config, m->weights);
  m->storage = t.storage;
  return m;
}

}  // namespace

struct MtpProposer::Impl {
  const LoadedModel& target;
  const MtpWeights& w;
  std::unique_ptr<LoadedModel> block;
  std::unique_ptr<Transformer> tf;
  std::unique_ptr<KvManager> kv;
  const KernelTable* k = nullptr;
  int dim = 0, context = 0;
  struct Slot {
    KvManager::SeqId seq = -1;
    int base = 0;  // the target's position of the block's position 0
    int len = 0;   // positions the block has followed (from base)
    bool fed = false, used = false;
    std::vector<float> last;  // the target's hidden state at base + len - 1 (zeros at first)
  };
  std::vector<Slot> slots;
  int current = 0;
  std::vector<float> cat, in, emb, hidden;
  std::vector<const float*> rows;

  explicit Impl(const LoadedModel& t) : target(t), w(BlockOf(t)) {}

  // The block over tokens[0..n) at its positions p.., each paired with the hidden state before
  // it (prev for tokens[0], then hid's rows); its final hidden states into `hidden`, and the
  // last token's logits when `logits`.
  const float* Run(const int32_t* tokens, int n, int p, const float* prev, const float* hid,
                   bool logits) {
    const size_t d = static_cast<size_t>(dim);
    const WeightTensor& table = w.embed ? w.embed : target.weights.tok_embd;
    const auto to_float = Traits(table.type).to_float;
    const float eps = block->config.norm_eps;
    for (int j = 0; j < n; ++j) {
      to_float(table.data + static_cast<size_t>(tokens[j]) * table.row_bytes, emb.data(),
               static_cast<int64_t>(d));
      float* c = cat.data() + 2 * d * static_cast<size_t>(j);
      k->rmsnorm(c, emb.data(), w.enorm, dim, eps);
      k->rmsnorm(c + d, j == 0 ? prev : hid + (static_cast<size_t>(j) - 1) * d, w.hnorm, dim, eps);
      rows[static_cast<size_t>(j)] = in.data() + d * static_cast<size_t>(j);
    }
    tf->Project(w.eh_proj, cat.data(), n, in.data());
    StepItem item{tokens, n, p, nullptr, 1};
    const KvView view = kv->View(slots[static_cast<size_t>(current)].seq);
    item.kv = &view;
    item.embeds = rows.data();
    item.hidden = hidden.data();
    const float* out = nullptr;
    kv->BeginStep();
    tf->Step(&item, 1, logits ? StepOutput::kLogits : StepOutput::kHidden, &out);
    kv->EndStep();
    return out;
  }
};

MtpProposer::MtpProposer(const LoadedModel& target, ThreadPool& pool, const EngineOptions& o,
                         int context, int slots)
    : impl_(std::make_unique<Impl>(target)) {
  Impl& s = *impl_;
  s.block = BlockModel(target);
  if (o.relayout_weights && o.forward.int8_activations)
    RelayoutWeights(s.block.get(), o.huge_pages, nullptr, WeightRange{0, -1, false});
  s.k = &GetKernels(ParseIsa(o.isa), PrefetchOf(o));
  s.dim = target.config.dim;
  s.context = std::min(context, target.config.context_length);
  s.tf = std::make_unique<Transformer>(*s.block, *s.k, pool, kMtpRows, o.forward, 1);
  s.tf->SetContext(s.context);
  KvCacheOptions ko;
  ko.prefix_cache = false;  // the block's KV follows its sequence, rolled back by truncation
  ko.k_type = ko.v_type = KvDtype::kF16;
  s.kv = std::make_unique<KvManager>(s.block->config, ko, s.context * slots, s.tf.get());
  s.slots.resize(static_cast<size_t>(slots));
  for (auto& slot : s.slots) {
    slot.seq = s.kv->Create(s.context);
    slot.last.assign(static_cast<size_t>(s.dim), 0.0f);
  }
  const size_t d = static_cast<size_t>(s.dim);
  s.cat.resize(2 * d * kMtpRows);
  s.in.resize(d * kMtpRows);
  s.hidden.resize(d * kMtpRows);
  s.emb.resize(d);
  s.rows.resize(kMtpRows);
}

MtpProposer::~MtpProposer() = default;

uint64_t MtpProposer::MemoryBytes() const {
  const Impl& m = *impl_;
  return m.kv->Memory().allocated_bytes + m.tf->scratch_bytes() + m.block->relaid_bytes +
         sizeof(float) * (m.cat.size() + m.in.size() + m.hidden.size());
}

bool MtpProposer::Acquire(int* slot) {
  for (size_t i = 1; i < impl_->slots.size(); ++i) {  // slot 0 is the single-sequence engine's
    if (!impl_->slots[i].used) {
      impl_->slots[i].used = true;
      impl_->slots[i].fed = false;
      *slot = static_cast<int>(i);
      return true;
    }
  }
  return false;
}

void MtpProposer::Select(int slot) {
  impl_->current = slot;
}

void MtpProposer::Release(int slot) {
  auto& s = impl_->slots[static_cast<size_t>(slot)];
  impl_->kv->Truncate(s.seq, 0);
  s.used = s.fed = false;
}

void MtpProposer::Feed(const int32_t* tokens, int n, int pos, const float* hidden) {
  Impl& m = *impl_;
  Impl::Slot& s = m.slots[static_cast<size_t>(m.current)];
  if (!s.fed || pos != s.base + s.len || pos - s.base + n > m.context) {  // start over here
    s.fed = true;
    s.base = pos;
    s.len = 0;
    std::fill(s.last.begin(), s.last.end(), 0.0f);
    if (n > m.context) {  // (a sequence past the block's context: the last ones only)
      tokens += n - m.context;
      hidden += static_cast<size_t>(n - m.context) * m.dim;
      s.base = pos + n - m.context;
      n = m.context;
    }
  }
  m.kv->Truncate(s.seq, s.len);  // (drafted positions go)
  if (!m.kv->Reserve(s.seq, s.len + n)) Fail("the prediction block's KV cache is full");
  const size_t d = static_cast<size_t>(m.dim);
  for (int done = 0; done < n;) {
    const int c = std::min(kMtpRows, n - done);
    const float* prev = done == 0 ? s.last.data() : hidden + (static_cast<size_t>(done) - 1) * d;
    m.Run(tokens + done, c, s.len, prev, hidden + static_cast<size_t>(done) * d, false);
    m.kv->Commit(s.seq, tokens + done, c);
    s.len += c;
    done += c;
  }
  std::memcpy(s.last.data(), hidden + (static_cast<size_t>(n) - 1) * d, sizeof(float) * d);
}

int MtpProposer::Propose(const int32_t* h, int n, int k, int32_t* out, DraftDist* q) {
  Impl& m = *impl_;
  Impl::Slot& s = m.slots[static_cast<size_t>(m.current)];
  if (n < 1 || !s.fed || s.base + s.len != n - 1) return 0;
  k = std::min(k, m.context - s.len);
  if (k <= 0) return 0;
  m.kv->Truncate(s.seq, s.len);
  if (!m.kv->Reserve(s.seq, s.len + k)) return 0;
  const int V = m.target.config.n_vocab;
  int32_t tok = h[n - 1];
  const float* prev = s.last.data();
  for (int i = 0; i < k; ++i) {
    const float* logits = m.Run(&tok, 1, s.len + i, prev, nullptr, true);
    tok = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
    out[i] = tok;
    if (q != nullptr) q[i].probs.clear();  // one-hot
    prev = m.hidden.data();                // the block's own state chains into the next
  }
  return k;
}

}  // namespace paddock
