// The KV cache's disk tier (kv/kv_disk.h): blocks saved when a sequence is freed come back,
// byte for byte, to another KV manager on the same directory (a restart); another identity never
// sees them; flipped, truncated and torn files are detected, removed and recomputed; the byte
// budget removes the least recently used files; an unwritable directory is an error at start;
// greedy text with the tier is the text without it, after a restart too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/hash64.h"
#include "kv/kv_disk.h"
#include "kv/kv_manager.h"
#include "paddock/engine.h"
#include "paddock/error.h"
#include "synth/synth.h"
#include "test_util.h"

namespace paddock {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> KvFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".kv") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A byte of each slot's K and V in every layer, from the token and the layer.
uint8_t Mark(int32_t token, int layer, int kv) {
  return static_cast<uint8_t>(token * 7 + layer * 3 + kv);
}

// Computes (writes marks for) tokens [0, n) of a new sequence and frees it.
void Compute(KvManager& kv, const std::vector<int32_t>& toks, const ModelConfig& c) {
  const auto s = kv.Create(256);
  const int cached = kv.MatchPrefix(s, toks.data(), static_cast<int>(toks.size()));
  ASSERT_TRUE(kv.Reserve(s, static_cast<int>(toks.size())));
  const KvView v = kv.View(s);
  for (int t = cached; t < static_cast<int>(toks.size()); ++t)
    for (int l = 0; l < c.n_layers; ++l) {
      std::memset(v.K(l, t), Mark(toks[static_cast<size_t>(t)], l, 0), v.layers[l].k_row_bytes);
      std::memset(v.V(l, t), Mark(toks[static_cast<size_t>(t)], l, 1), v.layers[l].v_row_bytes);
    }
  kv.Commit(s, toks.data() + cached, static_cast<int>(toks.size()) - cached);
  kv.Free(s);
}

// The positions [0, upto) of a sequence matched against toks hold the marks.
void ExpectMarks(KvManager& kv, KvManager::SeqId s, const std::vector<int32_t>& toks, int upto,
                 const ModelConfig& c) {
  const KvView v = kv.View(s);
  for (int t = 0; t < upto; ++t)
    for (int l = 0; l < c.n_layers; ++l) {
      ASSERT_EQ(v.K(l, t)[0], Mark(toks[static_cast<size_t>(t)], l, 0)) << t << " " << l;
      ASSERT_EQ(v.V(l, t)[v.layers[l].v_row_bytes - 1], Mark(toks[static_cast<size_t>(t)], l, 1));
    }
}

std::vector<int32_t> Tokens(int n, int base) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = base + i;
  return t;
}

KvDiskOptions Dir(const std::string& d, uint64_t budget = 0) {
  KvDiskOptions o;
  o.dir = d;
  o.budget_bytes = budget;
  return o;
}

TEST(KvDisk, BlocksComeBackAfterARestartAndOnlyUnderTheirIdentity) {
  const ModelConfig c = test::TinyKvConfig(3, 2, 8);
  const std::string dir = test::TempPath("kvdisk");
  const auto toks = Tokens(18, 100);  // 4 full blocks of 4, 2 tokens more
  {
    KvManager kv(c, test::TinyKvOptions(4, 16, c), 0);
    kv.AttachDisk(Dir(dir), 42);
    Compute(kv, toks, c);
    kv.FlushDisk();
    EXPECT_EQ(kv.disk()->stats().blocks_written, 4u);
    kv.CheckInvariants();  // the written blocks were handed back
  }
  EXPECT_EQ(KvFiles(dir).size(), 4u);
  {  // "restart": a new manager on the same directory and identity
    KvManager kv(c, test::TinyKvOptions(4, 16, c), 0);
    kv.AttachDisk(Dir(dir), 42);
    const auto s = kv.Create(64);
    EXPECT_EQ(kv.MatchPrefix(s, toks.data(), 18), 16);
    ExpectMarks(kv, s, toks, 16, c);
    EXPECT_EQ(kv.disk()->stats().hits, 4u);
    kv.Free(s);
    // Now in RAM: a second lookup reads nothing more from disk.
    const auto s2 = kv.Create(64);
    EXPECT_EQ(kv.MatchPrefix(s2, toks.data(), 18), 16);
    EXPECT_EQ(kv.disk()->stats().hits, 4u);
    kv.Free(s2);
    kv.FlushDisk();
    EXPECT_EQ(kv.disk()->stats().blocks_written, 0u);  // already there: not written again
    kv.CheckInvariants();
  }
  {  // another identity (another model file, switches, kernels): nothing
    KvManager kv(c, test::TinyKvOptions(4, 16, c), 0);
    kv.AttachDisk(Dir(dir), 43);
    const auto s = kv.Create(64);
    EXPECT_EQ(kv.MatchPrefix(s, toks.data(), 18), 0);
    kv.Free(s);
  }
  {  // another KV type: other block hashes, nothing
    KvCacheOptions o = test::TinyKvOptions(4, 16, c);
    o.k_type = KvDtype::kF16;
    KvManager kv(c, o, 0);
    kv.AttachDisk(Dir(dir), 42);
    const auto s = kv.Create(64);
    EXPECT_EQ(kv.MatchPrefix(s, toks.data(), 18), 0);
    kv.Free(s);
  }
  fs::remove_all(dir);
}

TEST(KvDisk, AFlippedATruncatedAndATornFileAreRecomputedAndRemoved) {
  const ModelConfig c = test::TinyKvConfig(2, 1, 8);
  const std::string dir = test::TempPath("kvdisk");
  const auto toks = Tokens(17, 5);
  {
    KvManager kv(c, test::TinyKvOptions(4, 16, c), 0);
    kv.AttachDisk(Dir(dir), 7);
    Compute(kv, toks, c);
    kv.FlushDisk();
  }
  std::vector<std::string> files;
  for (int damage = 0; damage < 3; ++damage) {
    files = KvFiles(dir);
    ASSERT_EQ(files.size(), 4u);
    // One file damaged each round: a flipped byte, a truncation, a torn write.
    const std::string victim = files[static_cast<size_t>(damage)];
    if (damage == 0) {
      std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-3, std::ios::end);
      f.put('\x5a');
    } else if (damage == 1) {
      fs::resize_file(victim, fs::file_size(victim) - 100);
    } else {
      fs::resize_file(victim, 60);  // a header and a few tokens: what a torn write leaves
    }
    KvManager kv2(c, test::TinyKvOptions(4, 16, c), 0);
    kv2.AttachDisk(Dir(dir), 7);
    const auto s = kv2.Create(64);
    const int got = kv2.MatchPrefix(s, toks.data(), 17);
    EXPECT_LT(got, 16) << "damage " << damage;
    EXPECT_EQ(kv2.disk()->stats().corrupt, 1u);
    ExpectMarks(kv2, s, toks, got, c);  // what was read is exact
    EXPECT_FALSE(fs::exists(victim));   // removed
    kv2.Free(s);
    Compute(kv2, toks, c);  // recomputed and saved again
    kv2.FlushDisk();
    EXPECT_EQ(KvFiles(dir).size(), 4u);
    const auto s2 = kv2.Create(64);
    EXPECT_EQ(kv2.MatchPrefix(s2, toks.data(), 17), 16);
    kv2.Free(s2);
  }
  fs::remove_all(dir);
}

TEST(KvDisk, TheBudgetRemovesTheLeastRecentlyUsedFiles) {
  const ModelConfig c = test::TinyKvConfig(2, 1, 8);
  const std::string dir = test::TempPath("kvdisk");
  uint64_t file_bytes = 0;
  {
    KvManager kv(c, test::TinyKvOptions(4, 64, c), 0);
    kv.AttachDisk(Dir(dir), 9);
    Compute(kv, Tokens(5, 1000), c);
    kv.FlushDisk();
    file_bytes = kv.disk()->stats().bytes_on_disk;
    ASSERT_GT(file_bytes, 0u);
  }
  // Room for 10 files: 30 one-block prompts leave at most 10, the newest among them.
  fs::remove_all(dir);
  KvManager kv2(c, test::TinyKvOptions(4, 64, c), 0);
  kv2.AttachDisk(Dir(dir, file_bytes * 10), 9);
  for (int i = 0; i < 30; ++i) {
    Compute(kv2, Tokens(5, 2000 + 10 * i), c);
    kv2.FlushDisk();
  }
  const KvDiskStats st = kv2.disk()->stats();
  EXPECT_LE(st.bytes_on_disk, file_bytes * 10);
  EXPECT_GE(st.evicted, 20u);
  EXPECT_EQ(KvFiles(dir).size() * file_bytes, st.bytes_on_disk);
  const auto s = kv2.Create(64);  // the newest is still there
  const auto last = Tokens(5, 2000 + 10 * 29);
  EXPECT_EQ(kv2.MatchPrefix(s, last.data(), 5), 4);
  kv2.Free(s);
  fs::remove_all(dir);
}

TEST(KvDisk, AnUnwritableDirectoryIsAnErrorAtStart) {
  const ModelConfig c = test::TinyKvConfig();
  const std::string file = test::TempPath("kvdisk-file");
  { std::ofstream(file) << "x"; }
  KvManager kv(c, test::TinyKvOptions(4, 16, c), 0);
  try {
    kv.AttachDisk(Dir(file + "/sub"), 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-disk"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  KvCacheOptions off = test::TinyKvOptions(4, 16, c);
  off.prefix_cache = false;
  KvManager kv2(c, off, 0);
  EXPECT_THROW(kv2.AttachDisk(Dir(test::TempPath("kvdisk")), 1), Error);
  fs::remove(file);
}

TEST(KvDisk, TheHashSeesEveryByte) {
  std::vector<uint8_t> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 31);
  const uint64_t h = HashBytes(b.data(), b.size());
  for (size_t i : {size_t{0}, size_t{31}, size_t{32}, size_t{500}, size_t{990}, size_t{999}}) {
    b[i] ^= 1;
    EXPECT_NE(HashBytes(b.data(), b.size()), h) << i;
    b[i] ^= 1;
  }
  EXPECT_NE(HashBytes(b.data(), 999), h);
  Hash64 s;  // streamed in multiples of 32, then the rest: the same value
  s.Update(b.data(), 512);
  s.Update(b.data() + 512, 488);
  EXPECT_EQ(s.Digest(), h);
}

// A model file's identity is its content: a changed byte changes it, the same bytes written
// again (another time, another inode) do not; it is remembered per file version.
TEST(KvDisk, AFileIdentityFollowsItsContent) {
  const std::string dir = test::TempPath("kvdisk");
  const std::string f = test::TempPath("model");
  std::string bytes(100000, 'a');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  { std::ofstream(f, std::ios::binary) << bytes; }
  const uint64_t a = FileContentIdentity(f, dir);
  EXPECT_EQ(FileContentIdentity(f, dir), a);  // (from the remembered entry)
  EXPECT_TRUE(fs::exists(dir + "/.identities"));
  bytes[77777] ^= 1;
  fs::remove(f);
  { std::ofstream(f, std::ios::binary) << bytes; }
  EXPECT_NE(FileContentIdentity(f, dir), a);
  bytes[77777] ^= 1;
  fs::remove(f);
  { std::ofstream(f, std::ios::binary) << bytes; }
  EXPECT_EQ(FileContentIdentity(f, dir), a);
  fs::remove(f);
  fs::remove_all(dir);
}

// A file rewritten in place with its times put back (the content edited, size, inode and
// modification time as before) is read again: its identity changes.
TEST(KvDisk, AFileRewrittenInPlaceWithItsTimesRestoredGetsANewIdentity) {
  const std::string dir = test::TempPath("kvdisk");
  const std::string f = test::TempPath("model");
  std::string bytes(300000, 'a');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  { std::ofstream(f, std::ios::binary) << bytes; }
  struct stat before {};
  ASSERT_EQ(stat(f.c_str(), &before), 0);
  const uint64_t a = FileContentIdentity(f, dir);
  for (size_t i = 1000; i < bytes.size(); i += 4096) bytes[i] ^= 0x40;  // "other weights"
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, f.c_str(), times, 0), 0);
  struct stat after {};
  ASSERT_EQ(stat(f.c_str(), &after), 0);
  ASSERT_EQ(after.st_ino, before.st_ino);
  ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_NE(FileContentIdentity(f, dir), a);
  fs::remove(f);
  fs::remove_all(dir);
}

// Entries of the directory that are not regular files are refused, counted and never opened
// or followed: a FIFO where a block file goes (opening it would block), a link to a file
// outside, a linked subdirectory (no block file lands outside the directory).
TEST(KvDisk, AFifoALinkAndALinkedSubdirectoryAreRefusedNeverFollowed) {
  const ModelConfig c = test::TinyKvConfig(2, 1, 8);
  const std::string dir = test::TempPath("kvdisk");
  const std::string outside = test::TempPath("kvdisk-outside");
  fs::create_directories(outside);
  const auto toks = Tokens(17, 5);
  {
    KvManager kv(c, test::TinyKvOptions(4, 16, c), 0);
    kv.AttachDisk(Dir(dir), 7);
    Compute(kv, toks, c);
    kv.FlushDisk();
  }
  std::vector<std::string> files = KvFiles(dir);
  ASSERT_EQ(files.size(), 4u);
  fs::remove(files[0]);
  ASSERT_EQ(mkfifo(files[0].c_str(), 0644), 0);
  fs::remove(files[1]);
  { std::ofstream(outside + "/target") << "not a block"; }
  fs::create_symlink(outside + "/target", files[1]);
  {
    KvManager kv(c, test::TinyKvOptions(4, 16, c), 0);
    kv.AttachDisk(Dir(dir), 7);
    const auto s = kv.Create(64);
    const int got = kv.MatchPrefix(s, toks.data(), 17);  // returns: the FIFO is not waited on
    EXPECT_LT(got, 16);
    EXPECT_GE(kv.disk()->stats().refused, 1u);
    ExpectMarks(kv, s, toks, got, c);
    kv.Free(s);
  }
  EXPECT_TRUE(fs::exists(outside + "/target"));  // (the link removed, never its target)
  // A subdirectory replaced by a link to a directory outside: nothing is written there.
  const std::string sub = fs::path(files[2]).parent_path().string();
  fs::remove_all(sub);
  fs::create_directory_symlink(outside, sub);
  {
    KvManager kv(c, test::TinyKvOptions(4, 16, c), 0);
    kv.AttachDisk(Dir(dir), 7);
    Compute(kv, toks, c);
    kv.FlushDisk();
    EXPECT_GE(kv.disk()->stats().refused, 1u);
  }
  for (const auto& e : fs::recursive_directory_iterator(outside))
    EXPECT_NE(e.path().extension(), ".kv") << e.path();
  fs::remove_all(dir);
  fs::remove_all(outside);
}

// Writes stopped by an error (the directory deleted) resume once it takes files again, and the
// bytes counted follow what is there.
TEST(KvDisk, WritesResumeAfterTheDirectoryIsDeletedAndTheCountFollows) {
  const ModelConfig c = test::TinyKvConfig(2, 1, 8);
  const std::string dir = test::TempPath("kvdisk");
  KvDiskOptions o = Dir(dir);
  o.retry_seconds = 0;  // (every write after a stop tries the directory again)
  KvManager kv(c, test::TinyKvOptions(4, 16, c), 0);
  kv.AttachDisk(o, 7);
  Compute(kv, Tokens(17, 5), c);
  kv.FlushDisk();
  ASSERT_GT(kv.disk()->stats().bytes_on_disk, 0u);
  fs::remove_all(dir);
  // The first write finds no directory: writes stop (that block dropped) and the next one
  // makes the directory again and goes on.
  Compute(kv, Tokens(17, 100), c);
  kv.FlushDisk();
  const KvDiskStats st = kv.disk()->stats();
  EXPECT_FALSE(st.writes_stopped);
  EXPECT_GE(st.dropped_writes, 1u);
  uint64_t on_disk = 0;
  for (const std::string& f : KvFiles(dir)) on_disk += fs::file_size(f);
  EXPECT_GT(on_disk, 0u);
  EXPECT_EQ(st.bytes_on_disk, on_disk);  // the count is what is there, not what was
  fs::remove_all(dir);
}

// Greedy text with the tier is the text without it; a new engine on the same directory (a
// restart) reads the prompt's blocks and gives the same text again.
// The same text with the tier and after a restart, from the prompt's blocks on disk: for a
// model file (stories260K) and for Gemma 4's (its last layers share earlier layers' KV: their
// rows are not in a block's bytes).
// hits: the files a restart reads (the blocks, and a hybrid model's state snapshots).
void CheckRestart(const std::string& model, const std::string& dir, uint64_t hits = 6,
                  int snapshot_every = 8, int max_batch = 0) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 100; ++i) prompt.push_back(20 + (i * 37) % 400);
  EngineOptions eo;
  eo.model_path = model;
  eo.threads = 2;
  eo.state_snapshot_every = snapshot_every;
  if (max_batch > 0) eo.max_batch = max_batch;
  const GenerateOptions g = test::Greedy(24, true);
  std::string plain;
  {
    auto e = Engine::Create(eo);
    plain = e->GenerateTokens(prompt, g).text;
  }
  eo.kv_disk = dir;
  for (int run = 0; run < 2; ++run) {
    auto e = Engine::Create(eo);
    const GenerateResult r = e->GenerateTokens(prompt, g);
    EXPECT_EQ(r.text, plain) << "run " << run;
    const MemoryReport m = e->Memory();
    if (run == 0) {
      EXPECT_EQ(r.cached_tokens, 0);
    } else {  // the restart: the prompt's full blocks from disk
      EXPECT_EQ(r.cached_tokens, 96);
      EXPECT_EQ(m.kv_disk_hits, hits);
    }
  }
  eo.forward.fuse_qkv = false;  // another switch: another identity, nothing reused
  {
    auto e = Engine::Create(eo);
    EXPECT_EQ(e->GenerateTokens(prompt, g).cached_tokens, 0);
  }
  fs::remove_all(dir);
}

TEST(KvDisk, GreedyTextIsUnchangedWithTheTierAndAfterARestart) {
  const std::string model = test::ModelPath("stories260K.gguf");
  if (access(model.c_str(), R_OK) != 0) GTEST_SKIP() << "no " << model;
  CheckRestart(model, test::TempPath("kvdisk"));
}

TEST(KvDisk, Gemma4SharedKvLayersSurviveARestart) {
  const std::string model = test::TempPath("kvdisk-gemma4.gguf");
  WriteSyntheticModel(SynthPreset("tiny-gemma4"), model);
  CheckRestart(model, test::TempPath("kvdisk-gemma4"));  // (steps of 256: no ring is shorter)
  // Steps of 16: the local layers' rings (64 positions) are snapshotted every 2 blocks beside
  // the global layer's blocks, and a restart resumes at the last snapshot with both.
  CheckRestart(model, test::TempPath("kvdisk-gemma4-rings"), 6 + 3, 2, 16);
}

// A hybrid model's state snapshots (every 2 blocks here) are saved beside their blocks: after a
// restart the prompt resumes at the last one (block 6), state and blocks read back.
TEST(KvDisk, HybridStateSnapshotsSurviveARestart) {
  for (const char* preset : {"tiny-qwen35", "tiny-lfm2"}) {
    SCOPED_TRACE(preset);
    const std::string model = test::TempPath(std::string("kvdisk-") + preset + ".gguf");
    SynthSpec spec = SynthPreset(preset);
    spec.n_vocab = 512;  // (CheckRestart's prompt)
    WriteSyntheticModel(spec, model);
    CheckRestart(model, test::TempPath(std::string("kvdisk-") + preset), 6 + 3, 2);
  }
}

}  // namespace
}  // namespace paddock
