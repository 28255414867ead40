// paddock chat: an interactive conversation in the terminal.
//
// Each line on standard input is a user turn; the reply streams to standard output. The whole
// conversation is re-rendered with the model's chat template every turn, and the KV prefix
// cache makes the earlier turns free to re-read. Commands: /image FILE (with --mmproj: the image
// goes with the next message), /reset (forget the conversation), /exit (or end of input). Works
// with a pipe as well as a terminal, so it can be scripted.
#include <cstdio>
#include <iostream>
#include <string>

#include "args.h"
#include "base/strings.h"
#include "commands.h"
#include "paddock/paddock.h"
#include "progress.h"

namespace paddock::cli {

extern const std::vector<OptionSpec> kKvSpecs;
extern const OptionSpec kLoraSpec;  // cmd_run.cpp
void AddKvOptions(const Args& args, EngineOptions* eo);
void AddLoraOption(const Args& args, EngineOptions* eo);   // cmd_run.cpp
void AddSpecOptions(const Args& args, EngineOptions* eo);  // cmd_run.cpp
extern const std::vector<OptionSpec> kSpecSpecs;
extern const std::vector<OptionSpec> kGrammarSpecs;  // cmd_run.cpp

namespace {

std::vector<OptionSpec> ChatSpecs() {
  std::vector<OptionSpec> s = {
      {{"-m", "--model"}, true, "model file (required)"},
      {{"-z", "--tokenizer"}, true, "tokenizer file (llama2.c tokenizer.bin or vocabulary GGUF)"},
      {{"--system"}, true, "system prompt"},
      {{"--mmproj"},
       true,
       "a vision projector (llama.cpp's mmproj GGUF) for the model: `/image FILE` attaches an "
       "image to the next message"},
      {{"-n", "--n-predict"}, true, "most tokens per reply (default 512)"},
      {{"--temp"}, true, "temperature, 0 = greedy (default 0.7)"},
      {{"--top-k"}, true, "top-k, 0 = off (default 40)"},
      {{"--top-p"}, true, "top-p, 1 = off (default 0.95)"},
      {{"--min-p"}, true, "min-p, 0 = off (default 0.05)"},
      {{"--seed"}, true, "random seed"},
      {{"--chat-template"},
       true,
       "built-in chat template: chatml, llama2, llama3, mistral, phi3, gemma, zephyr (default: the "
       "model's own)"},
      {{"--chat-template-file"}, true, "a Jinja chat template file to use instead of the model's"},
      {{"-t", "--threads"}, true, "threads (default: one per physical core)"},
      {{"-c", "--ctx"}, true, "context in tokens (default: model's, at most 4096)"},
      {{"-h", "--help"}, false, "show this help"},
  };
  s.insert(s.end(), kKvSpecs.begin(), kKvSpecs.end());
  s.push_back(kLoraSpec);
  s.insert(s.end(), kSpecSpecs.begin(), kSpecSpecs.end());
  s.insert(s.end(), kGrammarSpecs.begin(), kGrammarSpecs.end());
  s.push_back(kNoTuneSpec);
  return s;
}

}  // namespace

namespace {

void ReadChatFlags(const Args& args, EngineOptions* eo, GenerateOptions* go) {
  try {
    eo->model_path = args.Str("-m");
    eo->mmproj = args.Str("--mmproj");
    eo->tokenizer_path = args.Str("-z");
    eo->threads = static_cast<int>(args.Int("-t", 0, 1, 1024));
    eo->context = static_cast<int>(args.Int("-c", 0, 1, 1 << 24));
    AddKvOptions(args, eo);
    AddLoraOption(args, eo);
    AddSpecOptions(args, eo);
    go->max_tokens = static_cast<int>(args.Int("-n", 512, 1, 1 << 24));
    go->sampling.temperature = static_cast<float>(args.Float("--temp", 0.7, 0, 100));
    go->sampling.top_k = static_cast<int>(args.Int("--top-k", 40, 0, 1 << 24));
    go->sampling.top_p = static_cast<float>(args.Float("--top-p", 0.95, 1e-6, 1));
    go->sampling.min_p = static_cast<float>(args.Float("--min-p", 0.05, 0, 1));
    go->sampling.seed = args.U64("--seed", go->sampling.seed);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// One reply to the conversation so far, streamed: a harmony model's (gpt-oss) reasoning to
// standard error, its answer to standard output and into the result (the template takes no
// markup back); any other model's text to standard output.
GenerateResult Reply(Engine& engine, const ChatFormatter& chat, const std::string& text,
                     const std::vector<int32_t>* ids, const GenerateOptions& go) {
  const bool harmony = chat.tool_format() == ToolFormat::kHarmony;
  HarmonyParser parse;
  std::string reasoning, answer, content;
  auto emit = [&] {
    std::fwrite(reasoning.data(), 1, reasoning.size(), stderr);
    std::fwrite(answer.data(), 1, answer.size(), stdout);
    std::fflush(stdout);
    content += answer;
    reasoning.clear();
    answer.clear();
  };
  const auto on_text = [&](std::string_view piece) {
    if (harmony) {
      parse.Feed(piece, &reasoning, &answer);
      emit();
    } else {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  GenerateResult r = ids != nullptr ? engine.GenerateTokens(*ids, go, on_text)
                                    : engine.Generate(text, go, on_text);
  if (harmony) {
    parse.Finish(&reasoning, &answer);
    emit();
    r.text = content;
  }
  return r;
}

// The loop: a line of input, the reply; /reset forgets, /exit (or the end of input) quits. A
// conversation that outgrows the context is reset.
void Converse(Engine& engine, const ChatFormatter& chat, const std::string& system,
              GenerateOptions go) {
  const ModelInfo& info = engine.info();
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  const size_t base = messages.size();
  go.parse_special = true;
  // The conversation's images in the order of their markers, and those for the next message.
  std::vector<std::string> images, pending;
  std::string line;
  for (;;) {
    std::fputs("> ", stderr);
    std::fflush(stderr);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      messages.resize(base);
      images.clear();
      pending.clear();
      continue;
    }
    if (line.rfind("/image", 0) == 0) {
      const std::string path(TrimSpace(std::string_view(line).substr(6)));
      if (!engine.has_vision()) {
        std::fprintf(stderr,
                     "paddock: this model takes no images (start chat with --mmproj FILE)\n");
        continue;
      }
      try {
        pending.push_back(ReadWholeFile(path, "image"));
      } catch (const Error& e) {
        std::fprintf(stderr, "paddock: /image FILE: %s\n", e.what());
        continue;
      }
      std::fprintf(stderr, "paddock: %s attached to your next message\n", path.c_str());
      continue;
    }
    if (line.empty() && pending.empty()) continue;
    std::string content;
    for (size_t k = 0; k < pending.size(); ++k) content += kImageMarker;
    messages.push_back({"user", content + line});
    const size_t had_images = images.size();
    images.insert(images.end(), pending.begin(), pending.end());
    pending.clear();
    const std::string text = chat.Render(messages, true);
    const bool has_bos =
        !info.bos_token.empty() && text.compare(0, info.bos_token.size(), info.bos_token) == 0;
    go.add_bos = engine.AddsBos() && !has_bos;
    GenerateResult r;
    try {
      std::vector<int32_t> ids;
      if (!images.empty())
        ids = engine.TokenizeImages(text, go.add_bos, nullptr, images, &go.images);
      r = Reply(engine, chat, text, images.empty() ? nullptr : &ids, go);
      go.images.reset();
    } catch (const Error& e) {
      // E.g. the conversation outgrew the context, or an image could not be read: say so,
      // forget the turn's image or the conversation, keep the session.
      go.images.reset();
      if (images.size() > had_images) {
        std::fprintf(stderr, "\npaddock: %s; the message is dropped\n", e.what());
        images.resize(had_images);
        messages.pop_back();
        continue;
      }
      std::fprintf(stderr, "\npaddock: %s; conversation reset\n", e.what());
      messages.resize(base);
      images.clear();
      continue;
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    messages.push_back({"assistant", r.text});
    if (r.finish == FinishReason::kContext) {
      std::fprintf(stderr, "paddock: the context is full; conversation reset\n");
      messages.resize(base);
      images.clear();
    }
  }
}

}  // namespace

int CmdChat(int argc, char** argv) {
  const std::vector<OptionSpec> specs = ChatSpecs();
  Args args("chat", specs, argc, argv);
  if (args.Has("-h")) {
    std::fputs(Usage("chat", "-m MODEL [options]   (then type; /image FILE, /reset, /exit)", specs)
                   .c_str(),
               stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw UsageError("chat: unexpected argument '" + args.positional()[0] + "'");
  if (!args.Has("-m")) throw UsageError("chat needs a model: -m MODEL");
  if (args.Has("--chat-template") && args.Has("--chat-template-file"))
    throw UsageError("chat: give --chat-template or --chat-template-file, not both");
  EngineOptions eo;
  GenerateOptions go;
  ReadChatFlags(args, &eo, &go);
  const GrammarOption grammar_opt = ReadGrammarOption(args);
  ApplyTuneCache(args, "", &eo);
  std::shared_ptr<Progress> load_bar;
  ShowLoadProgress(&eo, &load_bar);
  auto engine = Engine::Create(eo);
  if (grammar_opt.on) go.grammar = engine->CompileGrammar(grammar_opt.kind, grammar_opt.text);
  for (const auto& w : engine->info().warnings)
    std::fprintf(stderr, "paddock: warning: %s\n", w.c_str());
  const ModelInfo& info = engine->info();
  auto chat =
      ChatFormatter::Create(info, args.Str("--chat-template"), args.Str("--chat-template-file"));
  if (!chat->warning().empty())
    std::fprintf(stderr, "paddock: warning: %s\n", chat->warning().c_str());
  std::fprintf(stderr, "paddock: %s (%s, context %d), chat: %s.%s /reset forgets, /exit quits.\n",
               info.path.c_str(), info.arch.c_str(), info.context, chat->description().c_str(),
               engine->has_vision() ? " /image FILE attaches an image." : "");
  Converse(*engine, *chat, args.Str("--system"), go);
  return 0;
}

}  // namespace paddock::cli
