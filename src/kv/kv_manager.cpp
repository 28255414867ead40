#include "kv/kv_manager.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <new>

#include "base/strings.h"
#include "kv/kv_disk.h"

namespace paddock {

namespace {

// A 64-bit value as the two 32-bit words the block hash takes (copied: reading it through an
// int32_t pointer breaks the aliasing rules, which an optimizer that sees HashBlock's body, as
// in a unity build, is free to exploit).
std::array<int32_t, 2> Words(uint64_t v) {
  std::array<int32_t, 2> w;
  std::memcpy(w.data(), &v, sizeof v);
  return w;
}

std::string Trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && s[a] == ' ') ++a;
  while (b > a && s[b - 1] == ' ') --b;
  return s.substr(a, b - a);
}

int ParseLayerIndex(const std::string& s, int n_layers, const std::string& entry) {
  if (s == "first") return 0;
  if (s == "last") return n_layers - 1;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 0 || v >= n_layers) {
    Fail("--kv-layer-types: bad layer '%s' in '%s' (the model has layers 0-%d)", s.c_str(),
         entry.c_str(), n_layers - 1);
  }
  return static_cast<int>(v);
}

}  // namespace

void ParseKvLayerTypes(const std::string& spec, int n_layers, std::vector<KvDtype>* k,
                       std::vector<KvDtype>* v) {
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    const std::string entry = Trim(spec.substr(start, comma - start));
    start = comma + 1;
    if (entry.empty()) {
      if (comma == spec.size()) break;
      continue;
    }
    const size_t eq = entry.find('=');
    if (eq == std::string::npos)
      Fail("--kv-layer-types: entry '%s' is not LAYERS=TYPE", entry.c_str());
    const std::string layers = Trim(entry.substr(0, eq)), types = Trim(entry.substr(eq + 1));
    const size_t slash = types.find('/');
    const KvDtype kt = ParseKvDtype(types.substr(0, slash));
    const KvDtype vt = slash == std::string::npos ? kt : ParseKvDtype(types.substr(slash + 1));
    int lo, hi;
    if (layers == "*") {
      lo = 0;
      hi = n_layers - 1;
    } else if (const size_t dash = layers.find('-'); dash != std::string::npos && dash > 0) {
      lo = ParseLayerIndex(layers.substr(0, dash), n_layers, entry);
      hi = ParseLayerIndex(layers.substr(dash + 1), n_layers, entry);
      if (lo > hi) Fail("--kv-layer-types: empty range in '%s'", entry.c_str());
    } else {
      lo = hi = ParseLayerIndex(layers, n_layers, entry);
    }
    for (int l = lo; l <= hi; ++l) {
      (*k)[static_cast<size_t>(l)] = kt;
      (*v)[static_cast<size_t>(l)] = vt;
    }
    if (comma == spec.size()) break;
  }
}

static void LayerTypes(const ModelConfig& cfg, const KvCacheOptions& o, std::vector<KvDtype>* k,
                       std::vector<KvDtype>* v) {
  k->assign(static_cast<size_t>(cfg.n_layers), o.k_type);
  v->assign(static_cast<size_t>(cfg.n_layers), o.v_type);
  if (!o.layer_types.empty()) ParseKvLayerTypes(o.layer_types, cfg.n_layers, k, v);
}

static int WindowOf(const ModelConfig& cfg, const KvCacheOptions& o) {
  return o.sliding_window >= 0 ? o.sliding_window : cfg.sliding_window;
}

int KvRing(const ModelConfig& cfg, const KvCacheOptions& o, int l) {
  const int window = WindowOf(cfg, o);
  if (!o.rings || !cfg.local_kv_ring || window <= 0 || !cfg.StoresKv(l) || !cfg.LayerWindowed(l) ||
      cfg.EveryLayerWindowed() || o.layer_begin != 0 ||
      (o.layer_end != 0 && o.layer_end != cfg.n_layers))
    return 0;
  const int bs = std::max(o.block_size, 1);
  const int need = window + std::max(o.ring_step, 1) + kRingSlack;
  const int ring = (need + bs - 1) / bs * bs;
  return ring < cfg.context_length ? ring : 0;  // (a ring as long as the context saves nothing)
}

size_t KvStateBytes(const ModelConfig& cfg, const KvCacheOptions& o) {
  std::vector<KvDtype> k, v;
  LayerTypes(cfg, o, &k, &v);
  size_t b = KvStateBytes(cfg);
  for (int l = 0; l < cfg.n_layers; ++l) {
    const size_t ring = static_cast<size_t>(KvRing(cfg, o, l));
    b += ring * (KvRowBytes(k[static_cast<size_t>(l)], cfg.LayerKvHeads(l), cfg.LayerHeadDim(l)) +
                 KvRowBytes(v[static_cast<size_t>(l)], cfg.LayerKvHeads(l), cfg.LayerHeadDim(l)));
  }
  return b;
}

size_t KvBytesPerToken(const ModelConfig& cfg, const KvCacheOptions& o) {
  std::vector<KvDtype> k, v;
  LayerTypes(cfg, o, &k, &v);
  size_t b = 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    // It reads an earlier layer's (Gemma 4), or keeps a ring in its sequence's state slot.
    if (!cfg.StoresKv(l) || KvRing(cfg, o, l) > 0) continue;
    b += KvRowBytes(k[static_cast<size_t>(l)], cfg.LayerKvHeads(l), cfg.LayerHeadDim(l));
    b += KvRowBytes(v[static_cast<size_t>(l)], cfg.LayerKvHeads(l), cfg.LayerHeadDim(l));
  }
  return b;
}

// Snapshot slots in use: only with the prefix cache and a snapshot interval.
static int SnapshotSlots(const KvCacheOptions& o) {
  return o.prefix_cache && o.snapshot_every > 0 ? o.snapshot_slots : 0;
}

size_t KvStateBytes(const ModelConfig& cfg) {
  size_t b = 0;
  for (int l = 0; l < cfg.n_layers; ++l) b += cfg.StateFloats(l) * sizeof(float);
  return b;
}

int32_t KvPoolBlocks(const ModelConfig& cfg, const KvCacheOptions& o, int default_tokens) {
  if (o.block_size < 1 || o.block_size > 4096)
    Fail("KV block size %d is out of range [1, 4096]", o.block_size);
  if (o.num_blocks > 0) return o.num_blocks;
  // A model of recurrent layers only still keeps a block table (of empty rows): one byte.
  const size_t per_block =
      std::max<size_t>(KvBytesPerToken(cfg, o), 1) * static_cast<size_t>(o.block_size);
  const size_t state = KvStateBytes(cfg, o);
  const size_t states = state * static_cast<size_t>(o.state_slots + SnapshotSlots(o));
  if (o.memory_bytes > 0 && states >= o.memory_bytes)
    Fail("KV memory budget of %s holds no block beside %d sequence states of %s",
         FormatBytes(o.memory_bytes).c_str(), o.state_slots, FormatBytes(state).c_str());
  size_t blocks;
  if (o.memory_bytes > 0) {
    blocks = (o.memory_bytes - states) / per_block;  // the budget includes the null block
    if (blocks < 2)
      Fail(
          "KV memory budget of %s holds no usable block (one block of %d tokens needs %s, and one "
          "is reserved)",
          FormatBytes(o.memory_bytes).c_str(), o.block_size, FormatBytes(per_block).c_str());
  } else {
    const size_t tokens =
        static_cast<size_t>(default_tokens) + static_cast<size_t>(default_tokens) / 4;
    blocks =
        (tokens + static_cast<size_t>(o.block_size) - 1) / static_cast<size_t>(o.block_size) + 1;
  }
  if (blocks > (1u << 30)) Fail("KV memory budget asks for %zu blocks: too many", blocks);
  return static_cast<int32_t>(blocks);
}

KvManager::KvManager(const ModelConfig& cfg, const KvCacheOptions& o, int default_tokens,
                     Backend* backend)
    : cfg_(cfg), opt_(o), pool_(KvPoolBlocks(cfg, o, default_tokens), o.block_size) {
  if (o.sliding_window < -1) Fail("sliding window %d must not be negative", o.sliding_window);
  window_ = WindowOf(cfg, o);
  std::vector<KvDtype> kt, vt;
  LayerTypes(cfg, o, &kt, &vt);
  KvLayout layout;
  layout.layers.resize(static_cast<size_t>(cfg.n_layers));
  layout.num_blocks = pool_.num_blocks();
  layout.block_size = o.block_size;
  hash_seed_ = BlockPool::HashBlock(0x5eedull, &o.block_size, 1);
  const int own_end = o.layer_end > 0 ? o.layer_end : cfg.n_layers;
  if (o.layer_begin < 0 || own_end > cfg.n_layers || o.layer_begin >= own_end)
    Fail("KV layers [%d, %d) are not a range of the model's %d", o.layer_begin, own_end,
         cfg.n_layers);
  layout.layer_begin = o.layer_begin;
  layout.layer_end = own_end;
  for (int l = 0; l < cfg.n_layers; ++l) {
    KvLayerView& L = layout.layers[static_cast<size_t>(l)];
    L.k_type = kt[static_cast<size_t>(l)];
    L.v_type = vt[static_cast<size_t>(l)];
    // Another stage's layer, or one reading an earlier layer's KV (Gemma 4): no storage.
    const bool own = l >= o.layer_begin && l < own_end && cfg.StoresKv(l);
    L.k_row_bytes = own ? KvRowBytes(L.k_type, cfg.LayerKvHeads(l), cfg.LayerHeadDim(l)) : 0;
    L.v_row_bytes = own ? KvRowBytes(L.v_type, cfg.LayerKvHeads(l), cfg.LayerHeadDim(l)) : 0;
    L.ring = own ? KvRing(cfg, o, l) : 0;
    if (L.ring == 0) bytes_per_token_ += L.k_row_bytes + L.v_row_bytes;
    const int32_t types[2] = {static_cast<int32_t>(L.k_type), static_cast<int32_t>(L.v_type)};
    hash_seed_ = BlockPool::HashBlock(hash_seed_, types, 2);  // KV dtypes change block content
  }
  hybrid_ = cfg.hybrid();
  for (const KvLayerView& L : layout.layers) stateful_ = stateful_ || L.ring > 0;
  stateful_ = stateful_ || hybrid_;
  if (stateful_) {
    if (o.state_slots < 1 || o.state_slots > 4096)
      Fail("state slots %d out of range [1, 4096]", o.state_slots);
    for (int l = 0; l < cfg.n_layers; ++l) {
      const bool own = l >= o.layer_begin && l < own_end;
      KvLayerView& L = layout.layers[static_cast<size_t>(l)];
      // A ring: its K rows, then its V rows (KvView::K, V).
      L.state_bytes = L.ring > 0 ? static_cast<size_t>(L.ring) * (L.k_row_bytes + L.v_row_bytes)
                      : own      ? cfg.StateFloats(l) * sizeof(float)
                                 : 0;
      state_bytes_ += L.state_bytes;
      if (L.ring > 0) ring_ = L.ring;  // (every ring has KvRing's one length)
    }
    if (ring_ > 0) {  // the rings' block table: logical block b -> b mod its blocks
      const int rb = ring_ / o.block_size;
      ring_table_.resize(static_cast<size_t>(pool_.num_blocks()) + 2);
      for (size_t b = 0; b < ring_table_.size(); ++b)
        ring_table_[b] = static_cast<int32_t>(b % static_cast<size_t>(rb));
    }
    if (o.snapshot_every < 0 || o.snapshot_every > 1 << 20 || o.snapshot_slots < 0 ||
        o.snapshot_slots > 4096)
      Fail("state snapshots every %d blocks, %d of them: out of range", o.snapshot_every,
           o.snapshot_slots);
    layout.num_states = o.state_slots + SnapshotSlots(o);
    for (int32_t i = o.state_slots - 1; i >= 0; --i) free_states_.push_back(i);
    snap_hash_.assign(static_cast<size_t>(SnapshotSlots(o)), 0);
    snap_used_.assign(snap_hash_.size(), 0);
    snap_saved_.assign(snap_hash_.size(), 0);
  }
  // The block memory is the backend's (in its own memory); without one, host memory.
  store_ = backend != nullptr ? backend->AllocKv(layout) : NewHostKvStore(layout);
}

void KvManager::CopyState(int32_t from, int32_t to) {
  const KvLayerView* L = store_->layers();
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const size_t n = L[l].state_bytes;
    if (n == 0) continue;
    uint8_t* dst = L[l].state + static_cast<size_t>(to) * n;
    if (from < 0) {
      std::memset(dst, 0, n);
    } else {
      std::memcpy(dst, L[l].state + static_cast<size_t>(from) * n, n);
    }
  }
}

KvManager::~KvManager() = default;

void KvManager::AttachDisk(const KvDiskOptions& o, uint64_t identity) {
  if (!opt_.prefix_cache) Fail("--kv-disk needs the prefix cache (drop --no-prefix-cache)");
  if (opt_.layer_begin != 0 || (opt_.layer_end != 0 && opt_.layer_end != cfg_.n_layers))
    Fail("--kv-disk is not supported with pipeline stages (each holds only its layers)");
  // Blocks waiting to be written stay referenced; when the pool runs out, the ones not being
  // written yet are taken back (NewBlock), so saving never starves the running sequences.
  const int queue = std::clamp(pool_.num_blocks(), 1, 4096);
  disk_ = std::make_unique<KvDiskTier>(o, identity, block_size(), store_.get(), queue);
  on_disk_.assign(static_cast<size_t>(pool_.num_blocks()), 0);
  staging_.resize(disk_->block_bytes());
  staging_state_.resize(state_bytes_);
  unpin_.reserve(static_cast<size_t>(queue));
}

void KvManager::FlushDisk() {
  if (!disk_) return;
  disk_->Flush();
  Unpin();
}

int32_t KvManager::NewBlock() {
  int32_t b = pool_.Allocate();
  if (b < 0 && disk_) {  // blocks waiting for the disk tier: written ones back, queued ones too
    Unpin();
    unpin_.clear();
    disk_->CancelQueued(&unpin_);
    for (int32_t x : unpin_) {
      on_disk_[static_cast<size_t>(x)] = 0;
      pool_.Release(x);
    }
    b = pool_.Allocate();
  }
  if (b > 0 && disk_) on_disk_[static_cast<size_t>(b)] = 0;
  return b;
}

void KvManager::Unpin() {
  if (!disk_ || !disk_->has_written()) return;
  unpin_.clear();
  disk_->TakeWritten(&unpin_);
  for (int32_t b : unpin_) pool_.Release(b);
}

// The sequence's full cached blocks not yet on disk, queued for saving (each keeps a reference
// until written); stops at the first the queue does not take.
void KvManager::SaveBlocks(const Sequence& s) {
  for (int b = s.released_blocks; b < s.hashed_blocks; ++b) {
    const int32_t blk = s.table[static_cast<size_t>(b)];
    if (blk == BlockPool::kNullBlock || on_disk_[static_cast<size_t>(blk)] || !pool_.IsCached(blk))
      continue;
    if (!disk_->Offer(blk, pool_.CachedHash(blk), pool_.CachedParent(blk), pool_.CachedTokens(blk)))
      return;
    pool_.AddRef(blk);
    on_disk_[static_cast<size_t>(blk)] = 1;
  }
  // A hybrid model's state snapshots at its boundaries, beside their blocks.
  for (int b = opt_.snapshot_every; stateful_ && b <= s.hashed_blocks && !snap_hash_.empty();
       b += opt_.snapshot_every) {
    const int32_t blk = s.table[static_cast<size_t>(b - 1)];
    if (blk == BlockPool::kNullBlock || !pool_.IsCached(blk)) continue;
    const uint64_t h = pool_.CachedHash(blk);
    const int32_t slot = FindSnapshot(h);
    if (slot < 0 || snap_saved_[static_cast<size_t>(slot - opt_.state_slots)]) continue;
    ReadSlot(slot, staging_state_.data());
    if (!disk_->OfferState(h, pool_.CachedParent(blk), pool_.CachedTokens(blk),
                           staging_state_.data(), state_bytes_))
      return;
    snap_saved_[static_cast<size_t>(slot - opt_.state_slots)] = 1;
  }
}

// The block with this content from the disk tier into a new block of the pool, registered in
// the prefix cache and referenced by the caller; -1 if it is not on disk or no block is free.
int32_t KvManager::LoadFromDisk(uint64_t h, uint64_t parent, const int32_t* tokens) {
  if (!disk_->Read(h, parent, tokens, staging_.data())) return -1;
  const int32_t blk = NewBlock();  // (may take back blocks queued for writing)
  if (blk < 0) return -1;
  store_->WriteBlock(blk, staging_.data());
  pool_.Register(blk, h, parent, tokens);
  on_disk_[static_cast<size_t>(blk)] = 1;
  return blk;
}

KvManager::Sequence& KvManager::Seq(SeqId id) {
  if (id < 0 || static_cast<size_t>(id) >= seqs_.size() || !seqs_[static_cast<size_t>(id)].live)
    Fail("KV: no sequence %d", id);
  return seqs_[static_cast<size_t>(id)];
}
const KvManager::Sequence& KvManager::Seq(SeqId id) const {
  return const_cast<KvManager*>(this)->Seq(id);
}

KvManager::SeqId KvManager::Create(int max_tokens) {
  SeqId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<SeqId>(seqs_.size());
    seqs_.emplace_back();
  }
  Sequence& s = seqs_[static_cast<size_t>(id)];
  s.live = true;
  s.len = 0;
  s.hashed_blocks = 0;
  s.released_blocks = 0;
  s.chain = hash_seed_;
  s.max_tokens = max_tokens;
  s.prefill_until = 0;
  s.prompt_len = 0;
  s.disk = true;
  s.table.clear();
  s.tokens.clear();
  s.table.reserve(static_cast<size_t>(max_tokens / block_size() + 2));
  s.tokens.reserve(static_cast<size_t>(max_tokens + block_size()));
  s.state = -1;
  s.forks_reserved = 0;
  if (stateful_) {
    if (FreeStates() <= 0) {
      s.live = false;
      free_ids_.push_back(id);
      Fail("no recurrent state slot is free (all %d hold sequences; --state-slots sets them)",
           opt_.state_slots);
    }
    s.state = TakeState();
    CopyState(-1, s.state);  // a new sequence starts from zeros
  }
  return id;
}

void KvManager::SaveState(SeqId id, uint8_t* dst) const {
  ReadSlot(Seq(id).state, dst);
}

void KvManager::LoadState(SeqId id, const uint8_t* src) {
  WriteSlot(Seq(id).state, src);
}

void KvManager::ReadSlot(int32_t slot, uint8_t* dst) const {
  const KvLayerView* L = store_->layers();
  for (int l = 0; l < cfg_.n_layers && slot >= 0; ++l) {
    const size_t n = L[l].state_bytes;
    if (n == 0) continue;
    std::memcpy(dst, L[l].state + static_cast<size_t>(slot) * n, n);
    dst += n;
  }
}

void KvManager::WriteSlot(int32_t slot, const uint8_t* src) {
  const KvLayerView* L = store_->layers();
  for (int l = 0; l < cfg_.n_layers && slot >= 0; ++l) {
    const size_t n = L[l].state_bytes;
    if (n == 0) continue;
    std::memcpy(L[l].state + static_cast<size_t>(slot) * n, src, n);
    src += n;
  }
}

int KvManager::SnapshotCut(int pos, int n) const {
  if (!stateful_ || snap_hash_.empty()) return n;
  const int every = opt_.snapshot_every * block_size();
  const int next = (pos / every + 1) * every;
  return pos + n > next ? next - pos : n;
}

int KvManager::snapshots() const {
  int n = 0;
  for (uint64_t h : snap_hash_) n += h != 0;
  return n;
}

// The state slot of the snapshot after the prefix whose last block hashes to `hash` (its use
// recorded), or -1.
int32_t KvManager::FindSnapshot(uint64_t hash) {
  for (size_t i = 0; i < snap_hash_.size(); ++i) {
    if (snap_hash_[i] != hash || hash == 0) continue;
    snap_used_[i] = ++snap_clock_;
    return opt_.state_slots + static_cast<int32_t>(i);
  }
  return -1;
}

// State slot `from` kept as the snapshot after the prefix `hash`: in its own slot if it has
// one, else a free or the least recently used one.
int32_t KvManager::TakeSnapshot(uint64_t hash, int32_t from, const uint8_t* bytes) {
  if (snap_hash_.empty()) return -1;
  if (const int32_t have = FindSnapshot(hash); have >= 0) return have;
  size_t at = 0;
  for (size_t i = 1; i < snap_hash_.size(); ++i)
    if (snap_used_[i] < snap_used_[at]) at = i;
  snap_hash_[at] = hash;
  snap_used_[at] = ++snap_clock_;
  snap_saved_[at] = bytes != nullptr;  // (read from the disk tier: on it already)
  const int32_t slot = opt_.state_slots + static_cast<int32_t>(at);
  if (bytes != nullptr) {
    WriteSlot(slot, bytes);
  } else {
    CopyState(from, slot);
  }
  return slot;
}

int32_t KvManager::TakeState() {
  const int32_t slot = free_states_.back();
  free_states_.pop_back();
  return slot;
}

bool KvManager::ReserveForks(SeqId id, int k) {
  Sequence& s = Seq(id);
  if (!stateful_ || k <= 0) return true;
  if (FreeStates() < k) return false;
  s.forks_reserved += k;
  reserved_states_ += k;
  return true;
}

KvManager::SeqId KvManager::Fork(SeqId parent) {
  if (Sequence& pr = Seq(parent); pr.forks_reserved > 0) {  // its slot set aside, now taken
    pr.forks_reserved--;
    reserved_states_--;
  }
  const Sequence p = Seq(parent);  // copy: Create may move seqs_
  const SeqId id = Create(p.max_tokens);
  Sequence& s = seqs_[static_cast<size_t>(id)];
  s.table = p.table;
  s.tokens = p.tokens;
  s.len = p.len;
  s.hashed_blocks = p.hashed_blocks;
  s.released_blocks = p.released_blocks;
  s.chain = p.chain;
  s.prefill_until = p.prefill_until;
  s.prompt_len = p.prompt_len;
  s.disk = p.disk;
  for (int32_t b : s.table) pool_.AddRef(b);
  if (stateful_) CopyState(p.state, s.state);
  return id;
}

void KvManager::Free(SeqId id) {
  Sequence& s = Seq(id);
  if (disk_ && s.disk) {
    Unpin();
    SaveBlocks(s);
  }
  // Release the tail first so that, among this sequence's cached blocks, the later ones are
  // evicted before the earlier (shared-prefix) ones.
  for (auto it = s.table.rbegin(); it != s.table.rend(); ++it) pool_.Release(*it);
  s.table.clear();
  s.tokens.clear();
  s.live = false;
  if (s.state >= 0) free_states_.push_back(s.state);
  s.state = -1;
  reserved_states_ -= s.forks_reserved;
  s.forks_reserved = 0;
  free_ids_.push_back(id);
}

void KvManager::SetPrefillUntil(SeqId id, int until) {
  Sequence& s = Seq(id);
  if (s.len != 0) Fail("KV: SetPrefillUntil on a non-empty sequence");
  s.prefill_until = std::max(0, until);
}

void KvManager::SetPromptLength(SeqId id, int n) {
  Seq(id).prompt_len = std::max(0, n);
}

void KvManager::SetPrefixNamespace(SeqId id, uint64_t ns) {
  Sequence& s = Seq(id);
  if (s.len != 0) Fail("KV: SetPrefixNamespace on a non-empty sequence");
  if (ns != 0) s.chain = BlockPool::HashBlock(hash_seed_ ^ 0x6c6f7261ull, Words(ns).data(), 2);
  // An adapter's id is not stable across restarts: its blocks stay in RAM.
  if (ns != 0) s.disk = false;
}

uint64_t KvManager::BlockParent(const Sequence& s, int b) const {
  const int bs = block_size();
  const uint64_t lead = static_cast<uint64_t>(std::clamp(s.prefill_until - b * bs, 0, bs));
  return lead == 0 ? s.chain
                   : BlockPool::HashBlock(s.chain ^ 0x9e3779b97f4a7c15ull, Words(lead).data(), 2);
}

int KvManager::MatchPrefix(SeqId id, const int32_t* tokens, int n) {
  Sequence& s = Seq(id);
  if (s.len != 0 || !s.table.empty()) Fail("KV: MatchPrefix on a non-empty sequence");
  // (A hybrid model's blocks resume only where a snapshot of its recurrent state is.)
  if (!opt_.prefix_cache || n <= 1 || (stateful_ && snap_hash_.empty())) return 0;
  const bool disk = disk_ && s.disk;
  if (disk) Unpin();
  const int bs = block_size();
  const int full = (n - 1) / bs;  // leave at least the last token to compute
  const uint64_t chain0 = s.chain;
  int snap_len = 0;
  uint64_t snap_chain = chain0;
  for (int b = 0; b < full; ++b) {
    const int32_t* t = tokens + static_cast<size_t>(b) * bs;
    const uint64_t parent = BlockParent(s, b);
    const uint64_t h = BlockPool::HashBlock(parent, t, bs);
    int32_t blk = pool_.Lookup(h, parent, t);
    if (blk < 0 && disk) blk = LoadFromDisk(h, parent, t);  // RAM first, then the disk tier
    if (blk < 0) break;
    s.table.push_back(blk);
    s.tokens.insert(s.tokens.end(), t, t + bs);
    s.chain = h;
    s.hashed_blocks++;
    s.len += bs;
    if (stateful_ && (b + 1) % opt_.snapshot_every == 0 &&
        (FindSnapshot(h) >= 0 ||
         (disk && disk_->ReadState(h, parent, t, staging_state_.data(), state_bytes_) &&
          TakeSnapshot(h, -1, staging_state_.data()) >= 0))) {
      snap_len = s.len;
      snap_chain = h;
    }
  }
  if (stateful_) {  // back to the last snapshot: its state, the blocks after it released
    while (s.len > snap_len) {
      pool_.Release(s.table.back());
      s.table.pop_back();
      s.len -= bs;
      s.hashed_blocks--;
    }
    s.tokens.resize(static_cast<size_t>(s.len));
    s.chain = snap_chain;  // (chain0 when none)
    if (snap_len > 0) CopyState(FindSnapshot(snap_chain), s.state);
  }
  return s.len;
}

void KvManager::CopyBlock(int32_t from, int32_t to) {
  if (on_copy_) on_copy_(from, to);
  store_->CopyBlock(from, to);
}

bool KvManager::Reserve(SeqId id, int total_len) {
  Sequence& s = Seq(id);
  const int bs = block_size();
  // Copy-on-write: the partial last block is about to be written; if it is shared, copy it.
  if (s.len % bs != 0 && total_len > s.len) {
    int32_t& last = s.table[static_cast<size_t>(s.len / bs)];
    if (pool_.ref_count(last) > 1) {
      const int32_t fresh = NewBlock();
      if (fresh < 0) return false;
      CopyBlock(last, fresh);
      pool_.Release(last);
      last = fresh;
    }
  }
  const size_t need = static_cast<size_t>((total_len + bs - 1) / bs);
  if (s.table.size() < need) Unpin();
  while (s.table.size() < need) {
    const int32_t b = NewBlock();
    if (b < 0) return false;
    s.table.push_back(b);
  }
  return true;
}

void KvManager::Commit(SeqId id, const int32_t* tokens, int n) {
  Sequence& s = Seq(id);
  const int bs = block_size();
  if (static_cast<size_t>((s.len + n + bs - 1) / bs) > s.table.size())
    Fail("KV: Commit past the reserved blocks");
  s.tokens.insert(s.tokens.end(), tokens, tokens + n);
  s.len += n;
  if (opt_.prefix_cache) {
    while ((s.hashed_blocks + 1) * bs <= s.len) {
      const size_t b = static_cast<size_t>(s.hashed_blocks);
      const int32_t* t = s.tokens.data() + b * static_cast<size_t>(bs);
      const uint64_t parent = BlockParent(s, static_cast<int>(b));
      const uint64_t h = BlockPool::HashBlock(parent, t, bs);
      pool_.Register(s.table[b], h, parent, t);
      s.chain = h;
      s.hashed_blocks++;
    }
  }
  // A hybrid model at a snapshot boundary: its state kept under the prefix's hash.
  if (stateful_ && !snap_hash_.empty() && s.len > 0 && s.hashed_blocks * bs == s.len &&
      s.hashed_blocks % opt_.snapshot_every == 0 && s.len <= s.prompt_len)
    TakeSnapshot(s.chain, s.state);
  // (Alternating layers keep everything for the global ones.)
  if (window_ > 0 && cfg_.EveryLayerWindowed()) {
    // The next query (position len) attends to positions >= len - window + 1.
    const int first_needed = s.len - window_ + 1;
    for (; (s.released_blocks + 1) * bs <= first_needed; ++s.released_blocks) {
      int32_t& e = s.table[static_cast<size_t>(s.released_blocks)];
      pool_.Release(e);  // the null block is ignored
      e = BlockPool::kNullBlock;
    }
  }
}

void KvManager::Truncate(SeqId id, int len) {
  Sequence& s = Seq(id);
  const int bs = block_size();
  if (len < 0 || len > s.len) Fail("KV: Truncate to %d of a sequence of %d tokens", len, s.len);
  if (hybrid_ && len < s.len)
    Fail("KV: a recurrent state cannot be rolled back (from %d tokens to %d)", s.len, len);
  // A ring keeps what a cut of up to ring - window positions left (the cut positions' rows
  // landed on ones no later token reads); from 0 every row is written again before it is read.
  if (ring_ > 0 && len > 0 && s.len - len > ring_ - window_)
    Fail("KV: a windowed layer's ring cannot be cut back %d tokens (at most %d)", s.len - len,
         ring_ - window_);
  if (len < s.hashed_blocks * bs || len < s.released_blocks * bs) {
    Fail("KV: Truncate to %d would cut into cached or released blocks", len);
  }
  s.len = len;
  s.tokens.resize(static_cast<size_t>(len));
  const size_t keep = static_cast<size_t>((len + bs - 1) / bs);
  while (s.table.size() > keep) {
    pool_.Release(s.table.back());
    s.table.pop_back();
  }
}

int KvManager::Length(SeqId id) const {
  return Seq(id).len;
}

KvView KvManager::View(SeqId id) const {
  const Sequence& s = Seq(id);
  KvView v;
  v.layers = store_->layers();
  v.table = s.table.data();
  v.n_table = static_cast<int>(s.table.size());
  v.block_size = block_size();
  v.window = window_;
  v.state_slot = s.state;
  v.ring_table = ring_table_.empty() ? nullptr : ring_table_.data();
  return v;
}

std::vector<int32_t> KvManager::Table(SeqId id) const {
  return Seq(id).table;
}

int64_t KvManager::LiveTokens() const {
  int64_t n = 0;
  const int bs = block_size();
  for (const Sequence& s : seqs_) {
    if (!s.live) continue;
    for (size_t b = 0; b < s.table.size(); ++b) {
      if (s.table[b] == BlockPool::kNullBlock) continue;
      n += std::clamp(s.len - static_cast<int>(b) * bs, 0, bs);
    }
  }
  return n;
}

KvMemoryStats KvManager::Memory() const {
  KvMemoryStats m;
  m.bytes_per_token = bytes_per_token_;
  m.allocated_bytes = store_->bytes();
  m.total_blocks = pool_.num_blocks() - 1;
  m.used_blocks = pool_.num_used();
  m.used_bytes =
      static_cast<size_t>(m.used_blocks) * static_cast<size_t>(block_size()) * bytes_per_token_;
  m.used_tokens = LiveTokens();
  if (stateful_) {
    m.state_bytes = state_bytes_;
    m.state_slots = opt_.state_slots;
    m.used_states = opt_.state_slots - static_cast<int32_t>(free_states_.size());
    m.used_bytes += static_cast<size_t>(m.used_states) * state_bytes_;
    m.snapshot_slots = static_cast<int32_t>(snap_hash_.size());
  }
  return m;
}

void KvManager::CheckInvariants() const {
  pool_.CheckInvariants();
  std::vector<int32_t> refs(static_cast<size_t>(pool_.num_blocks()), 0);
  for (const Sequence& s : seqs_) {
    if (!s.live) continue;
    for (int32_t b : s.table) {
      if (b < 0 || b >= pool_.num_blocks()) Fail("KV invariant: table names block %d", b);
      if (b != BlockPool::kNullBlock) refs[static_cast<size_t>(b)]++;
    }
  }
  for (int32_t b = 1; b < pool_.num_blocks(); ++b) {
    if (refs[static_cast<size_t>(b)] != pool_.ref_count(b)) {
      Fail("KV invariant: block %d has %d references but %d table entries", b, pool_.ref_count(b),
           refs[static_cast<size_t>(b)]);
    }
  }
}

}  // namespace paddock
