// The scheduler without a model or threads: exact batches, preemption order, admission under
// the watermark, and the stop rule. KV blocks come from a real KvManager over tiny shapes.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/scheduler.h"
#include "engine/stop_rule.h"
#include "paddock/error.h"
#include "test_util.h"

namespace paddock {
namespace {

constexpr int kEos = 2;

struct Fixture {
  ModelConfig cfg = test::TinyKvConfig();
  KvManager kv;
  Scheduler sched;
  std::vector<Scheduler::Finished> finished;
  uint64_t arrivals = 0;
  Fixture(int blocks, SchedulerOptions o, int block_size = 4)
      : kv(cfg, test::TinyKvOptions(block_size, static_cast<size_t>(blocks), cfg), 0),
        sched(kv, o) {}

  Sequence* Add(int prompt_len, int max_tokens, int priority = 0, int first_token = 10) {
    auto s = std::make_unique<Sequence>();
    for (int i = 0; i < prompt_len; ++i) s->tokens.push_back(first_token + i);
    s->n_prompt = prompt_len;
    s->max_tokens = max_tokens;
    s->limit = prompt_len + max_tokens;
    s->priority = priority;
    s->arrival = ++arrivals;
    Sequence* p = s.get();
    sched.Add(std::move(s));
    return p;
  }
  // One step: schedule, commit, sample `token` for every sequence that samples.
  const Scheduler::Batch& Step(int token = 50) {
    const Scheduler::Batch& b = sched.Schedule(&finished);
    sched.Commit();
    std::vector<int32_t> next(b.seqs.size());
    for (size_t k = 0; k < b.seqs.size(); ++k) next[k] = b.seqs[k]->to_compute() == 0 ? token : -1;
    sched.Postprocess(
        next.data(),
        [](Sequence& s, int32_t t) {  // 77 completes a stop string
          return ApplyToken(s, t, t == kEos, nullptr, [](int32_t x) { return x == 77; });
        },
        &finished);
    kv.CheckInvariants();
    return b;
  }
  std::vector<int> Ns() const { return sched.batch().n; }
};

SchedulerOptions Opt(int budget, int max_running = 8, double watermark = 1.0) {
  SchedulerOptions o;
  o.token_budget = budget;
  o.max_running = max_running;
  o.kv_watermark = watermark;
  return o;
}

TEST(Scheduler, ChunkedPrefillSharesTheBudgetWithDecodesFirst) {
  Fixture f(64, Opt(8));
  Sequence* a = f.Add(5, 10);
  f.Step();  // a: its whole prompt (5 of 8 tokens), samples its first token
  EXPECT_EQ(f.Ns(), (std::vector<int>{5}));
  EXPECT_EQ(a->generated, 1);
  Sequence* b = f.Add(12, 10, 0, /*first_token=*/40);  // shares no prefix with a
  f.Step();  // a decodes (1), b gets the rest of the budget (7 of its 12)
  ASSERT_EQ(f.sched.batch().seqs.size(), 2u);
  EXPECT_EQ(f.sched.batch().seqs[0], a);
  EXPECT_EQ(f.Ns(), (std::vector<int>{1, 7}));
  EXPECT_EQ(b->computed, 7);
  EXPECT_EQ(b->generated, 0);  // a chunk in progress samples nothing
  f.Step();                    // decodes first, then b's last 5 prompt tokens
  EXPECT_EQ(f.sched.batch().seqs[0], a);
  EXPECT_EQ(f.Ns(), (std::vector<int>{1, 5}));
  EXPECT_EQ(b->generated, 1);
  EXPECT_TRUE(f.finished.empty());
}

TEST(Scheduler, TheStopRuleIsAppliedInOrder) {
  Fixture f(64, Opt(32));
  Sequence* eos = f.Add(3, 10);
  f.Step(kEos);  // end of generation: finished, the token not appended
  ASSERT_EQ(f.finished.size(), 1u);
  EXPECT_EQ(f.finished[0].seq.get(), eos);
  EXPECT_EQ(f.finished[0].why, FinishReason::kEos);
  EXPECT_EQ(eos->generated, 0);
  EXPECT_EQ(eos->tokens.size(), 3u);
  f.finished.clear();

  f.Add(3, 10);
  f.Step(77);  // a stop string completed: appended, then kStop
  ASSERT_EQ(f.finished.size(), 1u);
  EXPECT_EQ(f.finished[0].why, FinishReason::kStop);
  EXPECT_EQ(f.finished[0].seq->generated, 1);
  f.finished.clear();

  f.Add(3, 2);
  f.Step();
  f.Step();  // max_tokens = 2
  ASSERT_EQ(f.finished.size(), 1u);
  EXPECT_EQ(f.finished[0].why, FinishReason::kLength);
  f.finished.clear();

  Sequence* ctx = f.Add(3, 10);
  ctx->limit = 5;  // the context: prompt + generated fill 5 tokens
  f.Step();
  f.Step();
  ASSERT_EQ(f.finished.size(), 1u);
  EXPECT_EQ(f.finished[0].why, FinishReason::kContext);
  EXPECT_EQ(f.finished[0].seq->tokens.size(), 5u);
  f.finished.clear();

  f.Add(3, 0);  // prompt only: computed, nothing sampled
  f.Step();
  ASSERT_EQ(f.finished.size(), 1u);
  EXPECT_EQ(f.finished[0].why, FinishReason::kLength);
  EXPECT_EQ(f.finished[0].seq->generated, 0);
  EXPECT_TRUE(f.sched.idle());
  EXPECT_EQ(f.kv.Memory().used_blocks, 0);
}

TEST(Scheduler, OutOfBlocksPreemptsTheLowestPriorityLatestArrival) {
  // 4 blocks of 4 tokens. Three sequences of 4-token prompts take a block each; when they
  // grow past it, someone must give blocks back.
  Fixture f(4, Opt(32));
  Sequence* a = f.Add(4, 20, /*priority=*/1, 10);
  Sequence* b = f.Add(4, 20, 0, 30);
  Sequence* c = f.Add(4, 20, 0, 50);
  f.Step();  // all three prefill (3 blocks) and sample
  EXPECT_EQ(f.sched.running().size(), 3u);
  f.Step();  // each needs a 2nd block: only one is free. a (highest priority) gets it, then b
             // preempts c (latest arrival, lowest priority) and takes c's block.
  EXPECT_EQ(f.sched.preemptions(), 1u);
  ASSERT_EQ(f.sched.waiting().size(), 1u);
  EXPECT_EQ(f.sched.waiting()[0].get(), c);
  EXPECT_EQ(c->computed, 0);        // recomputed later
  EXPECT_EQ(c->tokens.size(), 5u);  // its tokens are kept
  EXPECT_EQ(c->seq, -1);
  EXPECT_EQ(f.sched.batch().seqs, (std::vector<Sequence*>{a, b}));
  EXPECT_TRUE(f.finished.empty());
}

TEST(Scheduler, AdmissionStopsAtTheWatermarkAndPriorityDisplaces) {
  Fixture f(8, Opt(64, 8, 0.25));  // admit only while under 2 of 8 blocks
  Sequence* a = f.Add(9, 20);      // 3 blocks: admitted (nothing runs yet)
  f.Add(2, 20);
  f.Step();
  EXPECT_EQ(f.sched.running().size(), 1u);  // the second waits: usage 3/8 >= 0.25
  EXPECT_EQ(f.sched.waiting().size(), 1u);
  Sequence* hi = f.Add(2, 20, /*priority=*/5);
  f.Step();  // the high-priority request displaces the running low-priority one, which is
             // then re-admitted (recomputing from its cached blocks) under the watermark
  EXPECT_EQ(f.sched.preemptions(), 1u);
  ASSERT_EQ(f.sched.batch().seqs.size(), 2u);
  EXPECT_EQ(f.sched.batch().seqs[0], hi);
  EXPECT_EQ(f.sched.batch().seqs[1], a);
  EXPECT_EQ(f.sched.batch().n[1], 2);  // 8 of its 10 tokens came back from the prefix cache
  EXPECT_EQ(f.sched.waiting().size(), 1u);
}

TEST(Scheduler, ASequenceThePoolCannotHoldEndsWithContext) {
  Fixture f(2, Opt(64));  // 8 token slots
  f.Add(6, 20);
  for (int i = 0; i < 4 && f.finished.empty(); ++i) f.Step();
  ASSERT_EQ(f.finished.size(), 1u);
  EXPECT_EQ(f.finished[0].why, FinishReason::kContext);
  EXPECT_EQ(f.finished[0].seq->tokens.size(), 9u);  // 8 slots computed + the last sampled
  EXPECT_EQ(f.kv.Memory().used_blocks, 0);
}

TEST(Scheduler, StaticBatchingAdmitsOnlyWhenNothingRuns) {
  SchedulerOptions o = Opt(64);
  o.static_batching = true;
  Fixture f(64, o);
  f.Add(3, 2);
  f.Step();
  f.Add(3, 2);
  f.Step();  // the first finishes here; the second was not admitted beside it
  EXPECT_EQ(f.sched.batch().seqs.size(), 1u);
  EXPECT_EQ(f.finished.size(), 1u);
  f.Step();
  EXPECT_EQ(f.sched.running().size(), 1u);
}

TEST(Scheduler, RemoveIfAndClearFreeEveryBlock) {
  Fixture f(16, Opt(4));
  Sequence* a = f.Add(3, 5);
  f.Add(6, 5);
  f.Add(2, 5);
  f.Step();  // a fully, the second partly (1 of 6), the third waits for budget
  f.sched.RemoveIf([&](const Sequence& s) { return &s == a; },
                   [](const Sequence&) { return FinishReason::kTimeout; }, &f.finished);
  ASSERT_EQ(f.finished.size(), 1u);
  EXPECT_EQ(f.finished[0].why, FinishReason::kTimeout);
  f.sched.Clear(&f.finished, /*running_only=*/true);
  EXPECT_EQ(f.finished.size(), 2u);
  EXPECT_EQ(f.sched.waiting().size(), 1u);
  f.sched.Clear(&f.finished);
  EXPECT_TRUE(f.sched.idle());
  EXPECT_EQ(f.kv.Memory().used_blocks, 0);
  f.kv.CheckInvariants();
}

TEST(Scheduler, PromptChecksAreSharedAndNameTheProblem) {
  GenerateOptions o;
  o.max_tokens = 4;
  EXPECT_THROW(ValidatePrompt({}, 16, 100, o), Error);
  EXPECT_THROW(ValidatePrompt(std::vector<int32_t>(16, 1), 16, 100, o), Error);
  EXPECT_THROW(ValidatePrompt({1, 100}, 16, 100, o), Error);
  EXPECT_NO_THROW(ValidatePrompt({1, 99}, 16, 100, o));
  o.stop = {""};
  EXPECT_THROW(ValidatePrompt({1}, 16, 100, o), Error);
  o.stop.clear();
  o.max_tokens = -1;
  EXPECT_THROW(ValidatePrompt({1}, 16, 100, o), Error);
}

}  // namespace
}  // namespace paddock
