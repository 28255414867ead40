#include "kv/block_pool.h"

#include <cstring>

#include "base/strings.h"

namespace paddock {

BlockPool::BlockPool(int32_t num_blocks, int block_size) : block_size_(block_size) {
  if (num_blocks < 2) Fail("KV block pool needs at least 2 blocks (got %d)", num_blocks);
  if (block_size < 1) Fail("KV block size must be positive (got %d)", block_size);
  const size_t n = static_cast<size_t>(num_blocks);
  ref_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  on_list_.assign(n, 0);
  size_t nb = 1;
  while (nb < 2 * n) nb <<= 1;
  buckets_.assign(nb, -1);
  bucket_next_.assign(n, -1);
  has_hash_.assign(n, 0);
  hash_.assign(n, 0);
  parent_.assign(n, 0);
  tokens_.assign(n * static_cast<size_t>(block_size), 0);
  ref_[0] = 1;  // the null block is permanently owned
  for (int32_t id = 1; id < num_blocks; ++id) ListPushBack(id);
}

void BlockPool::RequireIdle(const char* op) const {
  if (in_step_)
    Fail("KV block pool: %s during an engine step (ownership may change only between steps)", op);
}

void BlockPool::BeginStep() {
  if (in_step_) Fail("KV block pool: step already in progress");
  in_step_ = true;
}
void BlockPool::EndStep() {
  in_step_ = false;
}

void BlockPool::ListRemove(int32_t id) {
  const size_t i = static_cast<size_t>(id);
  const int32_t p = prev_[i], n = next_[i];
  if (p >= 0)
    next_[static_cast<size_t>(p)] = n;
  else
    head_ = n;
  if (n >= 0)
    prev_[static_cast<size_t>(n)] = p;
  else
    tail_ = p;
  prev_[i] = next_[i] = -1;
  on_list_[i] = 0;
  --num_free_;
}

void BlockPool::ListPushFront(int32_t id) {
  const size_t i = static_cast<size_t>(id);
  prev_[i] = -1;
  next_[i] = head_;
  if (head_ >= 0)
    prev_[static_cast<size_t>(head_)] = id;
  else
    tail_ = id;
  head_ = id;
  on_list_[i] = 1;
  ++num_free_;
}

void BlockPool::ListPushBack(int32_t id) {
  const size_t i = static_cast<size_t>(id);
  next_[i] = -1;
  prev_[i] = tail_;
  if (tail_ >= 0)
    next_[static_cast<size_t>(tail_)] = id;
  else
    head_ = id;
  tail_ = id;
  on_list_[i] = 1;
  ++num_free_;
}

void BlockPool::Unhash(int32_t id) {
  const size_t i = static_cast<size_t>(id);
  if (!has_hash_[i]) return;
  int32_t* link = &buckets_[Bucket(hash_[i])];
  while (*link != id) link = &bucket_next_[static_cast<size_t>(*link)];
  *link = bucket_next_[i];
  bucket_next_[i] = -1;
  has_hash_[i] = 0;
}

int32_t BlockPool::Allocate() {
  RequireIdle("Allocate");
  if (head_ < 0) return -1;
  const int32_t id = head_;
  ListRemove(id);
  if (has_hash_[static_cast<size_t>(id)]) {
    Unhash(id);
    stats_.evictions++;
  }
  ref_[static_cast<size_t>(id)] = 1;
  return id;
}

void BlockPool::AddRef(int32_t id) {
  if (id == kNullBlock) return;
  RequireIdle("AddRef");
  if (ref_[static_cast<size_t>(id)] == 0) Fail("KV block pool: AddRef on free block %d", id);
  ref_[static_cast<size_t>(id)]++;
}

void BlockPool::Release(int32_t id) {
  if (id == kNullBlock) return;
  RequireIdle("Release");
  int32_t& r = ref_[static_cast<size_t>(id)];
  if (r <= 0) Fail("KV block pool: Release of free block %d", id);
  if (--r == 0) {
    if (has_hash_[static_cast<size_t>(id)])
      ListPushBack(id);
    else
      ListPushFront(id);
  }
}

uint64_t BlockPool::HashBlock(uint64_t parent, const int32_t* tokens, int n) {
  uint64_t h = parent ^ 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x9E3779B97F4A7C15ull +
         (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  return h;
}

bool BlockPool::Matches(int32_t id, uint64_t hash, uint64_t parent, const int32_t* tokens) const {
  const size_t i = static_cast<size_t>(id);
  return hash_[i] == hash && parent_[i] == parent &&
         std::memcmp(&tokens_[i * static_cast<size_t>(block_size_)], tokens,
                     sizeof(int32_t) * static_cast<size_t>(block_size_)) == 0;
}

int32_t BlockPool::Lookup(uint64_t hash, uint64_t parent, const int32_t* tokens) {
  RequireIdle("Lookup");
  stats_.queries++;
  for (int32_t id = buckets_[Bucket(hash)]; id >= 0; id = bucket_next_[static_cast<size_t>(id)]) {
    if (!Matches(id, hash, parent, tokens)) continue;
    int32_t& r = ref_[static_cast<size_t>(id)];
    if (r == 0) ListRemove(id);
    r++;
    stats_.hits++;
    return id;
  }
  return -1;
}

void BlockPool::Register(int32_t id, uint64_t hash, uint64_t parent, const int32_t* tokens) {
  const size_t i = static_cast<size_t>(id);
  if (id == kNullBlock || has_hash_[i]) return;
  for (int32_t o = buckets_[Bucket(hash)]; o >= 0; o = bucket_next_[static_cast<size_t>(o)]) {
    if (Matches(o, hash, parent, tokens)) return;  // that content is already findable
  }
  has_hash_[i] = 1;
  hash_[i] = hash;
  parent_[i] = parent;
  std::memcpy(&tokens_[i * static_cast<size_t>(block_size_)], tokens,
              sizeof(int32_t) * static_cast<size_t>(block_size_));
  int32_t& head = buckets_[Bucket(hash)];
  bucket_next_[i] = head;
  head = id;
}

std::vector<int32_t> BlockPool::FreeListOrder() const {
  std::vector<int32_t> v;
  for (int32_t id = head_; id >= 0; id = next_[static_cast<size_t>(id)]) v.push_back(id);
  return v;
}

void BlockPool::CheckInvariants() const {
  int32_t count = 0;
  for (int32_t id = head_, prev = -1; id >= 0; prev = id, id = next_[static_cast<size_t>(id)]) {
    const size_t i = static_cast<size_t>(id);
    if (prev_[i] != prev) Fail("KV invariant: broken free-list link at block %d", id);
    if (ref_[i] != 0)
      Fail("KV invariant: block %d is on the free list with %d references", id, ref_[i]);
    if (++count > num_blocks()) Fail("KV invariant: free list has a cycle");
  }
  if (count != num_free_) Fail("KV invariant: free count %d, list holds %d", num_free_, count);
  for (int32_t id = 1; id < num_blocks(); ++id) {
    const size_t i = static_cast<size_t>(id);
    if (ref_[i] < 0) Fail("KV invariant: block %d has a negative count", id);
    if ((ref_[i] == 0) != (on_list_[i] != 0))
      Fail("KV invariant: block %d has %d references but listed=%d", id, ref_[i], on_list_[i]);
  }
  if (ref_[0] < 1) Fail("KV invariant: the null block was released");
}

}  // namespace paddock
