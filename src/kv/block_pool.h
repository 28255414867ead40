// kv/block_pool.h: fixed-size KV blocks with reference counts, an LRU free list and a prefix
// cache keyed by chained block hashes. Pure bookkeeping: no KV bytes, no model, no policy.
//
// Block 0 is the reserved null block (stands for released or absent blocks in a table). A
// block whose count drops to zero goes to the free list: blocks holding a registered prefix
// go to the tail and stay findable (LRU, evicted lazily when Allocate() reaches them), blocks
// without one go to the head and are reused first. Everything is sized at construction: no
// operation allocates memory.
//
// Ownership changes only between engine steps: while a step is in flight (BeginStep() ..
// EndStep(), worker threads reading and writing KV bytes) Allocate/Release/Lookup throw, so a
// block can never be handed to a new owner while a step may still touch it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace paddock {

struct PrefixCacheStats {
  int64_t queries = 0;  // block lookups
  int64_t hits = 0;
  int64_t evictions = 0;  // cached blocks reused for new content
};

class BlockPool {
 public:
  static constexpr int32_t kNullBlock = 0;

  // `num_blocks` includes the null block; `block_size` tokens per block.
  BlockPool(int32_t num_blocks, int block_size);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int block_size() const { return block_size_; }
  int32_t num_free() const { return num_free_; }  // free list length (incl. cached)
  int32_t num_used() const { return num_blocks() - 1 - num_free_; }

  // Pops the head of the free list (evicting its cached prefix if any); -1 if none is free.
  int32_t Allocate();
  void AddRef(int32_t id);
  void Release(int32_t id);
  int32_t ref_count(int32_t id) const { return ref_[static_cast<size_t>(id)]; }

  // Prefix cache. A block's identity: hash of (parent hash, its tokens); the tokens and parent
  // are compared on lookup, so a hash collision can never return wrong content.
  static uint64_t HashBlock(uint64_t parent, const int32_t* tokens, int n);
  // A block holding exactly this content (now referenced by the caller), or -1. Counts a
  // query (and a hit).
  int32_t Lookup(uint64_t hash, uint64_t parent, const int32_t* tokens);
  // Makes a full, referenced block findable. No-op if some block already holds that content.
  void Register(int32_t id, uint64_t hash, uint64_t parent, const int32_t* tokens);
  bool IsCached(int32_t id) const { return has_hash_[static_cast<size_t>(id)] != 0; }
  // A cached block's hash, parent hash and tokens (block_size of them).
  uint64_t CachedHash(int32_t id) const { return hash_[static_cast<size_t>(id)]; }
  uint64_t CachedParent(int32_t id) const { return parent_[static_cast<size_t>(id)]; }
  const int32_t* CachedTokens(int32_t id) const {
    return tokens_.data() + static_cast<size_t>(id) * static_cast<size_t>(block_size_);
  }
  const PrefixCacheStats& stats() const { return stats_; }

  void BeginStep();
  void EndStep();
  bool in_step() const { return in_step_; }

  // Block ids on the free list from head (next to be allocated) to tail.
  std::vector<int32_t> FreeListOrder() const;
  // Throws Error if internal structures disagree (for tests and the stress test).
  void CheckInvariants() const;

 private:
  void ListRemove(int32_t id);
  void ListPushFront(int32_t id);
  void ListPushBack(int32_t id);
  void Unhash(int32_t id);
  bool Matches(int32_t id, uint64_t hash, uint64_t parent, const int32_t* tokens) const;
  void RequireIdle(const char* op) const;
  size_t Bucket(uint64_t hash) const { return static_cast<size_t>(hash & (buckets_.size() - 1)); }

  int block_size_;
  std::vector<int32_t> ref_;
  std::vector<int32_t> prev_, next_;  // free-list links (-1 = none)
  std::vector<uint8_t> on_list_;
  int32_t head_ = -1, tail_ = -1;
  int32_t num_free_ = 0;
  // Prefix index: hash buckets chained through the blocks themselves.
  std::vector<int32_t> buckets_;
  std::vector<int32_t> bucket_next_;
  std::vector<uint8_t> has_hash_;
  std::vector<uint64_t> hash_, parent_;
  std::vector<int32_t> tokens_;  // block_size per block
  PrefixCacheStats stats_;
  bool in_step_ = false;
};

}  // namespace paddock
