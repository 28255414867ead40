// kv/kv_manager.h: the paged KV cache: block storage for every layer, per-sequence block
// tables, prefix reuse, sliding-window release, copy-on-write forks, memory accounting.
//
// Storage is allocated once from a byte budget, by the backend that runs the steps (its
// KvStore, in its own memory), and divided into blocks of `block_size` token slots across all
// layers; this class keeps the bookkeeping and never touches the bytes but to copy a block. A
// sequence owns an append-only table of block ids. Reserve() makes room before a step, Commit()
// records what the step computed (registering full blocks in the prefix cache and releasing blocks
// that fell out of the attention window). Knows nothing of scheduling policy; the caller decides
// who runs and who is preempted. Not thread-safe: one owner thread calls it, between steps
// (BeginStep/EndStep mark the steps).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kv_format.h"
#include "kv/block_pool.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/kv_view.h"

namespace paddock {

class KvDiskTier;
struct KvDiskOptions;

struct KvCacheOptions {
  size_t memory_bytes = 0;  // 0: room for the default token count plus 25%
  int block_size = 16;
  KvDtype k_type = KvDtype::kF16;
  KvDtype v_type = KvDtype::kF16;
  std::string layer_types;  // per-layer overrides, see ParseKvLayerTypes
  bool prefix_cache = true;
  int sliding_window = -1;  // -1: the model's; 0: off; N: force a window of N tokens
  // Pipeline stages (dist/pipeline.h): storage for layers [layer_begin, layer_end) only (0, 0:
  // every layer). The block count is the whole model's, so that every stage's block ids mean
  // the same slots; each stage holds its layers' share of the bytes.
  int layer_begin = 0, layer_end = 0;
  int32_t num_blocks = 0;  // a pipeline stage: exactly its head's block count (0: from the budget)
  // Hybrid recurrent models: sequences holding a recurrent state at once (each its own slot,
  // allocated with the pool and counted in its budget), and the prefix cache's state
  // snapshots: every snapshot_every blocks of a sequence its state is kept (in one of
  // snapshot_slots slots, least recently used reused), keyed by the prefix's block hash, so a
  // sequence sharing that prefix resumes there (0: none).
  int state_slots = 16;
  int snapshot_every = 8;
  int snapshot_slots = 8;
  // Windowed layers held as rings (Gemma 4's local layers, ModelConfig::local_kv_ring): each
  // sequence keeps only its last window + ring_step + kRingSlack positions of them, in its state
  // slot, instead of blocks of every position (KvRing). ring_step: the most tokens one step
  // runs (the engine's max_batch). Off: every layer in blocks (a backend without rings).
  bool rings = false;
  int ring_step = 256;
};

// Positions a ring keeps beyond the window and a step: a verification's drafts truncated away
// (rejected drafts' rows land in the ring past the kept ones, never over one still read).
constexpr int kRingSlack = 32;
// Layer l's ring (positions, a multiple of the block size) under `opt`, or 0: in blocks (no
// window, not a ring model, a pipeline stage's range, or a ring not shorter than the context).
int KvRing(const ModelConfig& cfg, const KvCacheOptions& opt, int l);

// Per-layer K/V types from a spec like "*=int4,first=int8,last=int8" or "0-3=int8/int4":
// comma-separated LAYERS=K[/V], LAYERS an index, a range A-B, first, last or *; later entries
// win. Throws Error naming the bad entry.
void ParseKvLayerTypes(const std::string& spec, int n_layers, std::vector<KvDtype>* k,
                       std::vector<KvDtype>* v);

struct KvMemoryStats {
  size_t bytes_per_token = 0;  // all layers, K and V
  size_t allocated_bytes = 0;  // the whole pool
  size_t used_bytes = 0;       // blocks referenced by sequences
  int32_t total_blocks = 0;    // excluding the null block
  int32_t used_blocks = 0;
  int64_t used_tokens = 0;  // token slots holding live tokens
  // Hybrid recurrent models: each sequence's state (all recurrent layers), the slots and the
  // ones live sequences hold (the bytes are in allocated_bytes and, for those, used_bytes).
  size_t state_bytes = 0;
  int32_t state_slots = 0;
  int32_t used_states = 0;
  int32_t snapshot_slots = 0;
};

class KvManager {
 public:
  using SeqId = int32_t;

  // `default_tokens` sizes the pool when options.memory_bytes is 0. The blocks' bytes are
  // `backend`'s (Backend::AllocKv: in its memory), or in host memory when it is null.
  KvManager(const ModelConfig& cfg, const KvCacheOptions& options, int default_tokens,
            Backend* backend = nullptr);
  ~KvManager();

  // A disk tier under the prefix cache (kv/kv_disk.h): full cached blocks of a sequence are
  // queued for saving when it is freed, and MatchPrefix reads on from the disk where RAM has
  // no more. `identity` names what shapes the KV values besides the tokens (the engine's model
  // file, tokenizer, switches, kernels). Needs the prefix cache and every layer's storage.
  void AttachDisk(const KvDiskOptions& o, uint64_t identity);
  const KvDiskTier* disk() const { return disk_.get(); }
  // Waits until the queued blocks are saved and takes them back (paddock cache warm; tests).
  void FlushDisk();

  // A new empty sequence able to grow to `max_tokens` (its table is reserved now); a hybrid
  // model's also takes a zeroed state slot (Error when none is free: CanCreate says).
  SeqId Create(int max_tokens);
  bool CanCreate() const { return !hybrid_ || FreeStates() > 0; }
  // Hybrid models: state slots neither held nor set aside for forks.
  int FreeStates() const { return static_cast<int>(free_states_.size()) - reserved_states_; }
  // Sets k state slots aside for `seq`'s forks to come (n > 1 choices fork after the prompt):
  // false (nothing set aside) when fewer are free. Its forks take them first; Free returns
  // the rest. A model without recurrent layers: always true.
  bool ReserveForks(SeqId seq, int k);
  // A sequence sharing all of `parent`'s blocks (copy-on-write for the partial last block)
  // and a copy of its recurrent state.
  SeqId Fork(SeqId parent);
  // Releases the sequence's blocks (registered blocks stay cached) and forgets it.
  void Free(SeqId seq);

  // On an empty sequence: reuses cached blocks for the longest block-aligned prefix of
  // tokens[0..n-1) (the last token is always left to compute). Returns the reused tokens.
  int MatchPrefix(SeqId seq, const int32_t* tokens, int n);
  // Positions below `until` of an empty sequence are computed by another kernel class (the
  // model's bf16 prefill of long prompts): a cached block is reused only by a sequence that
  // computes each of its positions in the same class, so reuse never changes a result. Set
  // before MatchPrefix; 0 (the default): every position in the common class.
  void SetPrefillUntil(SeqId seq, int until);
  // A hybrid model's snapshots of `seq` are kept only at boundaries within its prompt's first
  // n tokens: a prompt's chunked delta rule computes them as a later prompt holding the same
  // tokens would (a generated token's state comes token by token). Default: none past 0.
  void SetPromptLength(SeqId seq, int n);
  // Cached blocks are shared only among sequences of the same namespace (a LoRA adapter's id:
  // its K/V differ from the base model's for the same tokens). Set before MatchPrefix; 0 (the
  // default): the base model's.
  void SetPrefixNamespace(SeqId seq, uint64_t ns);
  // Makes room for positions [0, total_len). False if the pool ran out (nothing is lost:
  // blocks taken so far stay with the sequence).
  bool Reserve(SeqId seq, int total_len);
  // Records tokens just written at positions [Length(seq), Length(seq) + n).
  void Commit(SeqId seq, const int32_t* tokens, int n);
  // Shortens the sequence to its first `len` tokens (len <= Length): later positions are
  // forgotten and blocks wholly past them go back to the pool (also blocks reserved but never
  // committed). Blocks registered in the prefix cache or released by the window cannot be taken
  // back, so `len` must not cut into them (Error). Speculative decoding rolls back with it.
  // A hybrid model's recurrent state cannot be rolled back: len < Length is an Error there.
  void Truncate(SeqId seq, int len);
  // Whether the model has recurrent layers (a state slot per sequence).
  bool hybrid() const { return hybrid_; }
  // Each sequence holds a state slot (a recurrent state, a ring, or both).
  bool stateful() const { return stateful_; }
  // A hybrid model's chunk of n tokens from position pos, cut at the next snapshot boundary
  // (the step then ends there and Commit keeps the state); n itself otherwise.
  int SnapshotCut(int pos, int n) const;
  // Snapshots held (hybrid models; tests and the memory report).
  int snapshots() const;
  // A hybrid model's recurrent state of `seq` (every layer held), as state_bytes() bytes: what
  // speculative decoding keeps before a verification and puts back to recompute the accepted
  // tokens alone (a state cannot be truncated).
  size_t state_bytes() const { return state_bytes_; }
  void SaveState(SeqId seq, uint8_t* dst) const;
  void LoadState(SeqId seq, const uint8_t* src);
  int Length(SeqId seq) const;
  // Block `to` = block `from` in every layer held (copy-on-write; a pipeline stage replays its
  // head's copies with it).
  void CopyBlock(int32_t from, int32_t to);
  // Every layer's storage (a pipeline stage's own view of the blocks its head allocates).
  const KvLayerView* layer_views() const { return store_->layers(); }
  // Called with (from, to) for every block copied (copy-on-write): a pipeline's head forwards
  // the copies to the stages holding the other layers (dist/pipeline.h).
  void SetCopyListener(std::function<void(int32_t from, int32_t to)> f) { on_copy_ = std::move(f); }
  KvView View(SeqId seq) const;

  void BeginStep() { pool_.BeginStep(); }
  void EndStep() { pool_.EndStep(); }

  int window() const { return window_; }
  int block_size() const { return pool_.block_size(); }
  const BlockPool& pool() const { return pool_; }
  KvMemoryStats Memory() const;
  KvDtype k_type(int layer) const { return store_->layers()[layer].k_type; }
  KvDtype v_type(int layer) const { return store_->layers()[layer].v_type; }
  // Token slots of live sequences that hold tokens / that are allocated to them.
  int64_t LiveTokens() const;
  std::vector<int32_t> Table(SeqId seq) const;
  // Throws Error if any block is both free and referenced, or a reference count differs from
  // the number of table entries naming the block.
  void CheckInvariants() const;

 private:
  struct Sequence {
    bool live = false;
    std::vector<int32_t> table;
    std::vector<int32_t> tokens;  // tokens of the current partial + hashed history (for hashing)
    int len = 0;
    int hashed_blocks = 0;    // leading full blocks already registered
    int released_blocks = 0;  // leading blocks released by the window (null in the table)
    uint64_t chain = 0;       // hash of the last registered block
    int max_tokens = 0;
    int prefill_until = 0;   // SetPrefillUntil
    int prompt_len = 0;      // SetPromptLength
    bool disk = true;        // blocks may go to and come from the disk tier (base model's)
    int32_t state = -1;      // the recurrent state slot (hybrid models)
    int forks_reserved = 0;  // state slots set aside for its forks (ReserveForks)
  };
  int32_t TakeState();
  // Snapshot slots: the state slots after the sequences' (state_slots ..), each with the hash
  // of the prefix it is the state after (0: free) and its last use.
  int32_t FindSnapshot(uint64_t hash);
  // A snapshot for `hash` from state slot `from` (or these bytes, read from the disk tier); its
  // slot. The one it had when there is one.
  int32_t TakeSnapshot(uint64_t hash, int32_t from, const uint8_t* bytes = nullptr);
  void ReadSlot(int32_t slot, uint8_t* dst) const;
  void WriteSlot(int32_t slot, const uint8_t* src);
  std::vector<uint64_t> snap_hash_, snap_used_;
  std::vector<uint8_t> snap_saved_;     // per snapshot: offered to the disk tier
  std::vector<uint8_t> staging_state_;  // one state's bytes to or from the disk tier
  uint64_t snap_clock_ = 0;
  // Every recurrent layer's state of slot `to` = slot `from`'s, or zeros (from < 0).
  void CopyState(int32_t from, int32_t to);
  int32_t NewBlock();  // a block from the pool (its content is new: not on disk)
  void Unpin();        // releases the blocks the disk tier finished with
  void SaveBlocks(const Sequence& s);
  int32_t LoadFromDisk(uint64_t hash, uint64_t parent, const int32_t* tokens);
  // The parent hash of block b of s: its chain, salted with how many of the block's positions
  // fall below prefill_until (unchanged when none do).
  uint64_t BlockParent(const Sequence& s, int b) const;
  Sequence& Seq(SeqId id);
  const Sequence& Seq(SeqId id) const;
  std::function<void(int32_t, int32_t)> on_copy_;

  const ModelConfig& cfg_;
  KvCacheOptions opt_;
  BlockPool pool_;
  int window_ = 0;
  uint64_t hash_seed_ = 0;
  std::unique_ptr<KvStore> store_;    // the blocks' bytes: the backend's (model/backend.h)
  std::unique_ptr<KvDiskTier> disk_;  // (after store_: stops before the store goes)
  std::vector<uint8_t> on_disk_;      // per block: its content is saved or queued
  std::vector<uint8_t> staging_;      // one block's bytes read from disk
  std::vector<int32_t> unpin_;
  size_t bytes_per_token_ = 0;
  bool hybrid_ = false;
  bool stateful_ = false;            // hybrid_ or rings
  int ring_ = 0;                     // the rings' positions (KvRing), 0: none
  std::vector<int32_t> ring_table_;  // logical block b -> b mod the ring's blocks (KvView)
  size_t state_bytes_ = 0;           // one slot's, all layers
  std::vector<int32_t> free_states_;
  int reserved_states_ = 0;  // of free_states_, set aside for forks
  std::vector<Sequence> seqs_;
  std::vector<SeqId> free_ids_;
};

// Blocks the pool will have for `opt` (including the null block).
int32_t KvPoolBlocks(const ModelConfig& cfg, const KvCacheOptions& opt, int default_tokens);
// Bytes per token across layers for the chosen (per-layer) types.
size_t KvBytesPerToken(const ModelConfig& cfg, const KvCacheOptions& opt);
// Bytes of one sequence's recurrent state across layers (0: no recurrent layer); with opt, its
// rings' too (one sequence's state slot).
size_t KvStateBytes(const ModelConfig& cfg);
size_t KvStateBytes(const ModelConfig& cfg, const KvCacheOptions& opt);

}  // namespace paddock
