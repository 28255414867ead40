// server/bodies.cpp: the completion body (server/bodies.h): the choices' streams through the
// reply's splitters (reasoning, harmony channels, tool calls) into chunks.
#include "server/bodies.h"

#include <algorithm>

#include "base/timer.h"
#include "base/utf8.h"
#include "server/api_dialects.h"
#include "server/api_json.h"

namespace paddock::server {
namespace {

class StreamSource : public BodySource {
 public:
  StreamSource(std::vector<std::shared_ptr<RequestStream>> streams, ApiRequest ar,
               ResponseMeta meta, int n_prompt)
      : streams_(std::move(streams)),
        ar_(std::move(ar)),
        meta_(std::move(meta)),
        choices_(streams_.size(),
                 Choice{true, false, 0, ReasoningSplitter(ar_.reasoning_open),
                        ToolCallSplitter(ar_.tool_format), HarmonyParser(ar_.tool_calls)}),
        prompt_entries_(ar_.options.prompt_logprobs ? std::max(0, n_prompt - 1) : 0) {}
  void SetWaker(Waker waker) override {
    for (auto& s : streams_) s->SetOnReady(waker);
  }
  void Abort() override {
    for (auto& s : streams_) s->Cancel();
  }
  // Not streamed: one JSON body, its status waiting for it (an engine failure: 503).
  bool Whole() const override { return !ar_.stream; }
  int Status() const override { return status_; }
  Pull Next(std::string* out) override {
    if (finished_) return Pull::kEnd;
    const double now = NowSeconds();
    const bool want_lp = ar_.stream && ar_.options.generate.logprobs >= 0;
    bool sent = false, all_done = true;
    for (size_t i = 0; i < streams_.size(); ++i) {
      Choice& c = choices_[i];
      if (c.done) continue;
      text_.clear();
      lps_.clear();
      reasoning_.clear();
      // Everything the stream has now (text and the end may come together).
      RequestStream::Status st;
      do {
        st = streams_[i]->Wait(&text_, 0, want_lp ? &lps_ : nullptr);
      } while (st == RequestStream::Status::kText);
      const bool done = st == RequestStream::Status::kDone;
      if (ar_.stream) sent |= StreamChoice(i, done, out);
      c.done = done;
      all_done &= done;
    }
    if (all_done) {
      Finish(out);
      return Pull::kData;
    }
    if (!sent) {  // (a whole body waits: the HTTP layer watches its socket instead)
      if (!ar_.stream || now - last_ < kProbeSeconds) return Pull::kWait;
      out->append(ar_.stream ? ": keep-alive\n\n" : " ");
    }
    last_ = now;
    return Pull::kData;
  }

 private:
  struct Choice {
    bool first = true, done = false;
    size_t offset = 0;  // characters sent (completions' text_offset)
    ReasoningSplitter split;
    ToolCallSplitter tools;
    HarmonyParser harmony;
  };

  // Choice i's new text (text_, lps_) as chunks: its prompt entries first (a streaming echo),
  // content, reasoning, tool calls (at the end) and the finish. True if anything was written.
  bool StreamChoice(size_t i, bool done, std::string* out) {
    Choice& c = choices_[i];
    // Choice 0 of a streaming echo gets the prompt's entries first: they are the prompt's.
    size_t skip = 0;
    while (i == 0 && prompt_lps_.size() < prompt_entries_ && skip < lps_.size())
      prompt_lps_.push_back(std::move(lps_[skip++]));
    lps_.erase(lps_.begin(), lps_.begin() + static_cast<long>(skip));
    std::vector<ChatToolCall> calls;
    Split(c, done, &calls);
    bool sent = false;
    const bool echo_due = c.first && ar_.echo && (done || !text_.empty() || !lps_.empty());
    if (!text_.empty() || !reasoning_.empty() || !lps_.empty() || echo_due) {
      ChunkPart p = Part(i);
      p.text = text_;
      p.reasoning = reasoning_;
      p.logprobs = std::move(lps_);
      out->append(StreamChunk(ar_, meta_, p));
      sent = true;
    }
    if (!calls.empty()) {
      ChunkPart p = Part(i);
      p.tool_calls = &calls;
      out->append(StreamChunk(ar_, meta_, p));
      sent = true;
    }
    if (done) {
      ChunkPart p = Part(i);
      const FinishReason why = streams_[i]->result().finish;
      p.finish = !calls.empty() && (why == FinishReason::kEos || why == FinishReason::kStop)
                     ? "tool_calls"
                     : OpenAiFinishReason(why);
      const std::string& stop = streams_[i]->result().stop;
      if (!stop.empty()) p.stop = &stop;
      out->append(StreamChunk(ar_, meta_, p));
      sent = true;
    }
    return sent;
  }

  // text_ split as the reply's format wants: harmony channels, or a <think> section, and tool
  // calls (content until the calls start; the calls, parsed, at the end into *calls).
  void Split(Choice& c, bool done, std::vector<ChatToolCall>* calls) {
    if (ar_.harmony) {  // reasoning, content and calls by channel and recipient
      content_.clear();
      c.harmony.Feed(text_, &reasoning_, &content_);
      if (done) {
        c.harmony.Finish(&reasoning_, &content_);
        *calls = c.harmony.calls();
      }
      text_.swap(content_);
    } else if (ar_.reasoning) {
      content_.clear();
      c.split.Feed(text_, &reasoning_, &content_);
      if (done) c.split.Finish(&reasoning_, &content_);
      text_.swap(content_);
    }
    if (!ar_.tool_calls || ar_.harmony) return;
    content_.clear();
    c.tools.Feed(text_, &content_);
    if (done) {
      content_ += c.tools.TakeHeld();
      const std::string tail = c.tools.tail();
      if (!tail.empty()) {
        ParsedToolCalls pr = ParseToolCalls(ar_.tool_format, tail);
        *calls = std::move(pr.calls);
        if (!pr.content.empty()) content_ += (content_.empty() ? "" : "\n") + pr.content;
      }
    }
    text_.swap(content_);
  }

  // Every choice done: the whole body, or the usage chunk and [DONE].
  void Finish(std::string* out) {
    std::vector<GenerateResult> results;
    for (auto& s : streams_) results.push_back(s->result());
    finished_ = true;
    for (const GenerateResult& r : results) {
      if (r.error.empty()) continue;
      // The engine failed the request (a device or a pipeline stage lost): an error, not a
      // short answer. A whole body is answered 503 (its status waited for it); a stream's
      // status went out with its first bytes, so the event says it (OpenAI's error object,
      // which its SDKs raise on).
      const std::string err =
          nlohmann::json{
              {"error",
               {{"message", r.error}, {"type", "server_error"}, {"code", "engine_failure"}}}}
              .dump();
      if (!ar_.stream) status_ = 503;
      out->append(ar_.stream ? "data: " + err + "\n\n" : err);
      return;
    }
    if (!ar_.stream) {
      out->append(CompletionBody(ar_, meta_, results));
    } else {
      if (ar_.include_usage) out->append(StreamUsageChunk(ar_, meta_, results));
      out->append("data: [DONE]\n\n");
    }
  }

  // The next chunk of choice i: the echo (prompt text and entries) goes with its first.
  ChunkPart Part(size_t i) {
    Choice& c = choices_[i];
    ChunkPart p;
    p.index = static_cast<int>(i);
    p.first = c.first;
    p.echo = c.first && ar_.echo;
    p.prompt_logprobs = &prompt_lps_;
    if (p.echo) c.offset = CountCodePoints(ar_.echo_text);
    p.offset = &c.offset;
    c.first = false;
    return p;
  }

  std::vector<std::shared_ptr<RequestStream>> streams_;
  const ApiRequest ar_;
  const ResponseMeta meta_;
  std::vector<Choice> choices_;
  const size_t prompt_entries_;
  std::vector<TokenLogprob> prompt_lps_, lps_;
  std::string text_, reasoning_, content_;
  bool finished_ = false;
  int status_ = 0;  // a whole body's status (0: the response's)
  double last_ = NowSeconds();
};

// The OpenAI body of `inner`, translated (ReplyTranslator) as it is pulled.
class TranslatedBody : public BodySource {
 public:
  TranslatedBody(std::shared_ptr<BodySource> inner, std::unique_ptr<ReplyTranslator> tr)
      : inner_(std::move(inner)), tr_(std::move(tr)) {}
  void SetWaker(Waker waker) override { inner_->SetWaker(std::move(waker)); }
  void Abort() override { inner_->Abort(); }
  bool Whole() const override { return inner_->Whole(); }
  int Status() const override { return inner_->Status(); }
  Pull Next(std::string* out) override {
    if (ended_) return Pull::kEnd;
    const size_t before = out->size();
    // Pull until something translates to bytes or the inner body waits or ends: a chunk that
    // translates to nothing (a role-only delta) must not leave the connection waiting.
    for (;;) {
      buf_.clear();
      const Pull p = inner_->Next(&buf_);
      if (p == Pull::kEnd) {
        tr_->End(out);
        ended_ = true;
        return out->size() > before ? Pull::kData : Pull::kEnd;
      }
      if (p == Pull::kWait) return out->size() > before ? Pull::kData : Pull::kWait;
      tr_->Feed(buf_, out);
      if (out->size() > before) return Pull::kData;
    }
  }

 private:
  std::shared_ptr<BodySource> inner_;
  std::unique_ptr<ReplyTranslator> tr_;
  std::string buf_;
  bool ended_ = false;
};

}  // namespace

std::shared_ptr<BodySource> MakeTranslatedBody(std::shared_ptr<BodySource> inner,
                                               std::unique_ptr<ReplyTranslator> translator) {
  return std::make_shared<TranslatedBody>(std::move(inner), std::move(translator));
}

std::shared_ptr<BodySource> MakeStreamBody(std::vector<std::shared_ptr<RequestStream>> streams,
                                           ApiRequest ar, ResponseMeta meta, int n_prompt) {
  return std::make_shared<StreamSource>(std::move(streams), std::move(ar), std::move(meta),
                                        n_prompt);
}

}  // namespace paddock::server
