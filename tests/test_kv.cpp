// The paged KV cache without a model: exact block ids, hit/miss counts, eviction order,
// copy-on-write, sliding-window release, utilization, and a randomized stress test with
// concurrent readers (run under ASan and TSan by scripts/test).
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "kv/block_pool.h"
#include "kv/kv_manager.h"
#include "paddock/error.h"
#include "test_util.h"

namespace paddock {
namespace {

TEST(BlockPool, AllocationOrderAndEvictionAreExact) {
  BlockPool p(5, 4);  // null + blocks 1..4
  EXPECT_EQ(p.num_free(), 4);
  EXPECT_EQ(p.Allocate(), 1);
  EXPECT_EQ(p.Allocate(), 2);
  EXPECT_EQ(p.Allocate(), 3);
  const int32_t toks[4] = {7, 8, 9, 10};
  const uint64_t h = BlockPool::HashBlock(0, toks, 4);
  p.Register(1, h, 0, toks);
  p.Release(2);  // no prefix: goes to the head, reused first
  p.Release(1);  // cached prefix: goes to the tail, stays findable
  EXPECT_EQ(p.FreeListOrder(), (std::vector<int32_t>{2, 4, 1}));
  EXPECT_EQ(p.Allocate(), 2);
  EXPECT_EQ(p.Allocate(), 4);
  EXPECT_EQ(p.stats().evictions, 0);
  EXPECT_EQ(p.Lookup(h, 0, toks), 1);  // hit revives the cached block
  EXPECT_EQ(p.stats().hits, 1);
  EXPECT_EQ(p.ref_count(1), 1);
  p.Release(1);
  EXPECT_EQ(p.Allocate(), 1);  // the only free block: its prefix is evicted
  EXPECT_EQ(p.stats().evictions, 1);
  EXPECT_EQ(p.Lookup(h, 0, toks), -1);
  EXPECT_EQ(p.stats().queries, 2);
  EXPECT_EQ(p.Allocate(), -1);  // exhausted, not a crash
  p.CheckInvariants();
}

TEST(BlockPool, LookupComparesContentNotJustTheHash) {
  BlockPool p(3, 2);
  const int32_t a[2] = {1, 2}, b[2] = {1, 3};
  const int32_t id = p.Allocate();
  p.Register(id, 42, 0, a);
  EXPECT_EQ(p.Lookup(42, 0, b), -1);  // same hash, other tokens: a collision must miss
  EXPECT_EQ(p.Lookup(42, 7, a), -1);  // other parent
  EXPECT_EQ(p.Lookup(42, 0, a), id);
  EXPECT_EQ(p.ref_count(id), 2);
}

TEST(BlockPool, OwnershipCannotChangeDuringAStep) {
  BlockPool p(4, 2);
  const int32_t id = p.Allocate();
  p.BeginStep();
  EXPECT_THROW(p.Allocate(), Error);
  EXPECT_THROW(p.Release(id), Error);
  p.EndStep();
  p.Release(id);
  p.CheckInvariants();
}

ModelConfig TinyConfig(int layers = 2, int kv_heads = 1, int head_dim = 4) {
  return test::TinyKvConfig(layers, kv_heads, head_dim);
}
KvCacheOptions Opts(int block_size, size_t blocks, const ModelConfig& c) {
  return test::TinyKvOptions(block_size, blocks, c);
}

TEST(KvManager, PrefixReuseHitsExactBlocksAndLeavesTheLastToken) {
  const ModelConfig c = TinyConfig();
  KvManager kv(c, Opts(4, 16, c), 0);
  std::vector<int32_t> prompt(14);
  for (int i = 0; i < 14; ++i) prompt[static_cast<size_t>(i)] = 10 + i;
  const auto a = kv.Create(64);
  EXPECT_EQ(kv.MatchPrefix(a, prompt.data(), 14), 0);  // cold cache
  ASSERT_TRUE(kv.Reserve(a, 14));
  kv.Commit(a, prompt.data(), 14);
  const auto table_a = kv.Table(a);
  EXPECT_EQ(table_a, (std::vector<int32_t>{1, 2, 3, 4}));
  kv.Free(a);
  // Same 14 tokens: blocks 1-3 (12 tokens) are reused; the 4th block is partial.
  const auto b = kv.Create(64);
  EXPECT_EQ(kv.MatchPrefix(b, prompt.data(), 14), 12);
  EXPECT_EQ(kv.Table(b), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(kv.pool().stats().hits, 3);
  kv.Free(b);
  // A prompt of exactly 12 tokens reuses only 8: the last token is always computed.
  const auto d = kv.Create(64);
  EXPECT_EQ(kv.MatchPrefix(d, prompt.data(), 12), 8);
  kv.Free(d);
  // A different second block: only the first block matches.
  std::vector<int32_t> other = prompt;
  other[5] = 99;
  const auto e = kv.Create(64);
  EXPECT_EQ(kv.MatchPrefix(e, other.data(), 14), 4);
  kv.Free(e);
  kv.CheckInvariants();
}

// Blocks whose positions were computed in another kernel class (the bf16 prefill of long
// prompts: SetPrefillUntil) are reused only by sequences computing each position in the same
// class: a long prompt never picks up a short one's blocks, nor a reply's (multi-turn), and
// vice versa.
TEST(KvManager, PrefixReuseKeepsToTheKernelClassOfEachPosition) {
  const ModelConfig c = TinyConfig();
  KvManager kv(c, Opts(4, 32, c), 0);
  std::vector<int32_t> t(20);
  for (int i = 0; i < 20; ++i) t[static_cast<size_t>(i)] = 30 + i;
  // A: a prompt of 10 in the bf16 class, then 10 generated tokens.
  const auto a = kv.Create(64);
  kv.SetPrefillUntil(a, 10);
  EXPECT_EQ(kv.MatchPrefix(a, t.data(), 10), 0);
  ASSERT_TRUE(kv.Reserve(a, 20));
  kv.Commit(a, t.data(), 20);
  kv.Free(a);
  // The same prompt, same class: blocks 1-2 (8 tokens) reused.
  const auto b = kv.Create(64);
  kv.SetPrefillUntil(b, 10);
  EXPECT_EQ(kv.MatchPrefix(b, t.data(), 10), 8);
  kv.Free(b);
  // The same tokens in the common class (a short prompt, or the switch off): none.
  const auto d = kv.Create(64);
  EXPECT_EQ(kv.MatchPrefix(d, t.data(), 10), 0);
  kv.Free(d);
  // A longer prompt holding A's reply (all 20 tokens, bf16 to 20): blocks 1-2 match, block 3
  // (positions 8-11: A computed 10 and 11 as generated tokens) does not.
  const auto e = kv.Create(64);
  kv.SetPrefillUntil(e, 20);
  EXPECT_EQ(kv.MatchPrefix(e, t.data(), 20), 8);
  kv.Free(e);
  EXPECT_THROW(
      {
        const auto f = kv.Create(64);
        ASSERT_TRUE(kv.Reserve(f, 4));
        kv.Commit(f, t.data(), 4);
        kv.SetPrefillUntil(f, 4);  // not on a sequence holding tokens
      },
      Error);
}

TEST(KvManager, EvictionTakesTheLeastRecentlyUsedTailFirst) {
  const ModelConfig c = TinyConfig();
  KvManager kv(c, Opts(2, 4, c), 0);  // 4 blocks of 2 tokens
  const int32_t t1[4] = {1, 2, 3, 4}, t2[4] = {5, 6, 7, 8};
  const auto a = kv.Create(8);
  ASSERT_TRUE(kv.Reserve(a, 4));
  kv.Commit(a, t1, 4);  // blocks 1, 2 (both full, registered)
  kv.Free(a);           // freed tail first: free list 3, 4, 2, 1
  EXPECT_EQ(kv.pool().FreeListOrder(), (std::vector<int32_t>{3, 4, 2, 1}));
  const auto b = kv.Create(8);
  ASSERT_TRUE(kv.Reserve(b, 6));  // takes 3, 4, then evicts 2 (a's second block)
  kv.Commit(b, t2, 4);
  EXPECT_EQ(kv.Table(b), (std::vector<int32_t>{3, 4, 2}));
  EXPECT_EQ(kv.pool().stats().evictions, 1);
  kv.Free(b);
  const auto d = kv.Create(8);
  EXPECT_EQ(kv.MatchPrefix(d, t1, 4), 2);  // a's first block survived
  kv.Free(d);
  kv.CheckInvariants();
}

TEST(KvManager, ForkSharesBlocksAndCopiesOnWrite) {
  const ModelConfig c = TinyConfig(1, 1, 4);
  KvManager kv(c, Opts(4, 8, c), 0);
  const auto a = kv.Create(32);
  const int32_t toks[6] = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(kv.Reserve(a, 6));
  for (int t = 0; t < 6; ++t)
    reinterpret_cast<float*>(kv.View(a).K(0, t))[0] = static_cast<float>(100 + t);
  kv.Commit(a, toks, 6);
  const auto b = kv.Fork(a);
  EXPECT_EQ(kv.Table(b), kv.Table(a));
  EXPECT_EQ(kv.pool().ref_count(kv.Table(a)[1]), 2);
  ASSERT_TRUE(kv.Reserve(b, 7));  // b writes into the shared partial block: copy first
  EXPECT_EQ(kv.Table(b)[0], kv.Table(a)[0]);
  EXPECT_NE(kv.Table(b)[1], kv.Table(a)[1]);
  reinterpret_cast<float*>(kv.View(b).K(0, 6))[0] = 999.0f;
  EXPECT_EQ(reinterpret_cast<float*>(kv.View(b).K(0, 5))[0], 105.0f);  // copied content
  ASSERT_TRUE(kv.Reserve(a, 7));
  EXPECT_NE(reinterpret_cast<float*>(kv.View(a).K(0, 6))[0], 999.0f);  // a's block untouched
  kv.CheckInvariants();
  kv.Free(a);
  kv.Free(b);
  EXPECT_EQ(kv.pool().num_used(), 0);
}

TEST(KvManager, SlidingWindowKeepsMemoryFlat) {
  const ModelConfig c = TinyConfig();
  KvCacheOptions o = Opts(16, 2048, c);
  o.sliding_window = 256;
  KvManager kv(c, o, 0);
  const auto s = kv.Create(16384 + 16);
  std::vector<int32_t> used_at;
  for (int len = 1; len <= 16384; ++len) {
    ASSERT_TRUE(kv.Reserve(s, len));
    const int32_t t = len % 50;
    kv.Commit(s, &t, 1);
    if (len % 1024 == 0) used_at.push_back(kv.pool().num_used());
  }
  for (int32_t u : used_at) EXPECT_EQ(u, used_at.front());
  EXPECT_LE(used_at.front(), 256 / 16 + 1);
  kv.CheckInvariants();
}

TEST(KvManager, UtilizationOf200RandomSequences) {
  const ModelConfig c = TinyConfig();
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> len(50, 2000);
  std::vector<int> lens(200);
  size_t blocks = 0;
  for (int& l : lens) {
    l = len(rng);
    blocks += static_cast<size_t>((l + 15) / 16);
  }
  KvManager kv(c, Opts(16, blocks, c), 0);
  int64_t tokens = 0;
  for (int l : lens) {
    const auto s = kv.Create(l);
    ASSERT_TRUE(kv.Reserve(s, l));
    std::vector<int32_t> t(static_cast<size_t>(l), 1);
    kv.Commit(s, t.data(), l);
    tokens += l;
  }
  const KvMemoryStats m = kv.Memory();
  EXPECT_EQ(m.used_tokens, tokens);
  const double util =
      static_cast<double>(m.used_tokens) / (static_cast<double>(m.total_blocks) * 16);
  std::printf("KV utilization of 200 random sequences: %.2f%% of allocated slots hold tokens\n",
              100 * util);
  EXPECT_GE(util, 0.95) << "utilization " << util;
  EXPECT_EQ(m.used_blocks, m.total_blocks);  // every block holds live tokens
}

TEST(KvManager, LayerTypeSpecs) {
  std::vector<KvDtype> k(4, KvDtype::kF16), v(4, KvDtype::kF16);
  ParseKvLayerTypes("*=int4,first=int8,last=int8/f16", 4, &k, &v);
  EXPECT_EQ(k, (std::vector<KvDtype>{KvDtype::kI8, KvDtype::kI4, KvDtype::kI4, KvDtype::kI8}));
  EXPECT_EQ(v, (std::vector<KvDtype>{KvDtype::kI8, KvDtype::kI4, KvDtype::kI4, KvDtype::kF16}));
  ParseKvLayerTypes("1-2=bf16", 4, &k, &v);
  EXPECT_EQ(k[1], KvDtype::kBF16);
  EXPECT_EQ(v[2], KvDtype::kBF16);
  EXPECT_THROW(ParseKvLayerTypes("9=int8", 4, &k, &v), Error);
  EXPECT_THROW(ParseKvLayerTypes("0=int3", 4, &k, &v), Error);
  EXPECT_THROW(ParseKvLayerTypes("junk", 4, &k, &v), Error);
  EXPECT_THROW(ParseKvLayerTypes("3-1=f16", 4, &k, &v), Error);
}

// --- KV row kernels --------------------------------------------------------------------

// --- stress ------------------------------------------------------------------------------

// Rows hold a function of (layer, position, token prefix), as real K/V do, so blocks shared
// through the prefix cache or a fork must read back exactly what their owner expects.
struct StressSeq {
  KvManager::SeqId id;
  std::vector<int32_t> tokens;   // all tokens, computed or pending
  std::vector<uint32_t> prefix;  // hash of tokens[0..t]
  int pending = 0;               // tokens appended but not yet computed
};

uint32_t PrefixHash(uint32_t prev, int32_t tok) {
  return (prev ^ static_cast<uint32_t>(tok)) * 16777619u + 1;
}

void StressRun(int window, uint32_t seed) {
  const ModelConfig c = TinyConfig(2, 2, 4);
  KvCacheOptions o = Opts(4, 48, c);
  o.sliding_window = window;
  KvManager kv(c, o, 0);
  ThreadPool pool(3);
  std::mt19937 rng(seed);
  std::vector<StressSeq> live;
  std::atomic<int64_t> verified{0};
  const int32_t shared[8] = {5, 6, 7, 8, 9, 10, 11, 12};
  int ops = 0;
  for (int step = 0; step < 1500; ++step) {
    // Between steps: change ownership.
    const int op = static_cast<int>(rng() % 10);
    if ((op < 3 || live.empty()) && live.size() < 8) {  // admit (often with a shared prefix)
      StressSeq s;
      s.id = kv.Create(256);
      const int n = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i)
        s.tokens.push_back(rng() % 2 ? shared[i % 8] : static_cast<int32_t>(rng() % 20));
      uint32_t h = 0;
      for (int32_t t : s.tokens) s.prefix.push_back(h = PrefixHash(h, t));
      const int reused = kv.MatchPrefix(s.id, s.tokens.data(), n);
      s.pending = n - reused;
      if (!kv.Reserve(s.id, n)) {
        kv.Free(s.id);  // no room: stays out (a scheduler would queue it)
      } else {
        live.push_back(std::move(s));
      }
    } else if (op < 6) {  // append a token to a random sequence
      StressSeq& s = live[rng() % live.size()];
      if (s.pending == 0 && s.tokens.size() < 200) {
        const int32_t t = static_cast<int32_t>(rng() % 20);
        if (kv.Reserve(s.id, static_cast<int>(s.tokens.size()) + 1)) {
          s.tokens.push_back(t);
          s.prefix.push_back(PrefixHash(s.prefix.back(), t));
          s.pending = 1;
        } else {  // out of blocks: preempt the most recent other sequence
          const size_t victim = live.size() - 1;
          if (&live[victim] != &s) {
            kv.Free(live[victim].id);
            live.pop_back();
          }
        }
      }
    } else if (op < 7 && live.size() < 8) {  // fork a fully computed sequence
      StressSeq& p = live[rng() % live.size()];
      if (p.pending == 0) {
        StressSeq f = p;
        f.id = kv.Fork(p.id);
        live.push_back(std::move(f));
      }
    } else if (op < 9) {  // finish or preempt
      const size_t i = rng() % live.size();
      kv.Free(live[i].id);
      live.erase(live.begin() + static_cast<long>(i));
    }
    ++ops;
    // The step: workers write the pending rows and verify every visible row, concurrently.
    std::vector<KvView> views;
    for (const auto& s : live) views.push_back(kv.View(s.id));
    kv.BeginStep();
    pool.ParallelFor(static_cast<int64_t>(live.size()), [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        const StressSeq& s = live[static_cast<size_t>(i)];
        const KvView& v = views[static_cast<size_t>(i)];
        const int len = static_cast<int>(s.tokens.size());
        for (int t = len - s.pending; t < len; ++t) {
          for (int l = 0; l < c.n_layers; ++l) {
            float* k = reinterpret_cast<float*>(v.K(l, t));
            k[0] = static_cast<float>(s.prefix[static_cast<size_t>(t)] & 0xffff);
            k[1] = static_cast<float>(t);
            k[2] = static_cast<float>(l);
          }
        }
        // The first query of this step (position len - pending) sees positions >= that - window
        // + 1.
        const int start = window > 0 ? std::max(0, len - s.pending - window + 1) : 0;
        for (int t = start; t < len - s.pending; ++t) {
          for (int l = 0; l < c.n_layers; ++l) {
            const float* k = reinterpret_cast<const float*>(v.K(l, t));
            if (k[0] != static_cast<float>(s.prefix[static_cast<size_t>(t)] & 0xffff) ||
                k[1] != static_cast<float>(t) || k[2] != static_cast<float>(l)) {
              ADD_FAILURE() << "corrupt KV row: seq " << s.id << " position " << t << " layer " << l
                            << " len " << len << " pending " << s.pending << " block "
                            << v.table[t / v.block_size] << " got " << k[0] << "," << k[1]
                            << " want " << (s.prefix[static_cast<size_t>(t)] & 0xffff) << " step "
                            << step;
              return;
            }
            verified++;
          }
        }
      }
    });
    kv.EndStep();
    for (auto& s : live) {
      if (s.pending > 0) {
        const int len = static_cast<int>(s.tokens.size());
        kv.Commit(s.id, s.tokens.data() + (len - s.pending), s.pending);
        s.pending = 0;
      }
    }
    kv.CheckInvariants();
    if (::testing::Test::HasFailure()) return;
  }
  for (auto& s : live) kv.Free(s.id);
  kv.CheckInvariants();
  EXPECT_EQ(kv.pool().num_used(), 0) << "leaked blocks";
  EXPECT_GT(verified.load(), 10000);
  EXPECT_GT(kv.pool().stats().hits, 0);
  EXPECT_GT(ops, 1000);
}

TEST(KvStress, RandomOperationsWithConcurrentReaders) {
  StressRun(0, 11);
}
TEST(KvStress, RandomOperationsWithSlidingWindow) {
  StressRun(12, 12);
}

}  // namespace
}  // namespace paddock
