#include <cstdio>
#include <cstdlib>
#include <string>

#include "args.h"
#include "base/cpu.h"
#include "base/mapped_file.h"
#include "base/strings.h"
#include "commands.h"
#include "paddock/paddock.h"
#include "progress.h"

namespace paddock::cli {

namespace {

std::vector<OptionSpec> RunSpecs();

}  // namespace

extern const std::vector<OptionSpec> kKvSpecs;  // shared with bench
const std::vector<OptionSpec> kKvSpecs = {
    {{"--device"},
     true,
     "where the model runs: cpu, or vulkan / vulkan:N (a Vulkan device: paddock info --devices "
     "lists them) (default cpu)"},
    {{"--device-memory"},
     true,
     "a Vulkan device's budget for the weights: bytes (K/M/G suffixes) (default: its memory)"},
    {{"--gpu-layers"},
     true,
     "partial offload: the first N layers on the Vulkan device, the rest and the output head on "
     "the CPU (default: all on the device)"},
    {{"--kv-memory"},
     true,
     "KV cache budget: bytes (K/M/G suffixes) or N% of available RAM (default: context + 25%)"},
    {{"--kv-block-size"}, true, "tokens per KV block (default 16)"},
    {{"--state-slots"},
     true,
     "hybrid recurrent models (Qwen3.5, LFM2): sequences holding a recurrent state at once, each "
     "a slot in the KV budget (default: the batch's sequences + 2)"},
    {{"--state-snapshot-every"},
     true,
     "hybrid models: keep a prompt's recurrent state every N KV blocks, so a prompt sharing the "
     "prefix resumes there (default 8; 0: none)"},
    {{"--state-snapshots"},
     true,
     "hybrid models: state snapshots kept (least recently used reused; default 8)"},
    {{"--cache-type-k"}, true, "K cache type: f32, f16, bf16, int8, int4 (default f16)"},
    {{"--cache-type-v"}, true, "V cache type: f32, f16, bf16, int8, int4 (default f16)"},
    {{"--kv-layer-types"}, true, "per-layer K/V types, e.g. '*=int4,first=int8,last=int8'"},
    {{"--no-prefix-cache"}, false, "do not reuse cached KV blocks across requests"},
    {{"--no-kv-ring"},
     false,
     "Gemma 4's windowed layers keep K/V of every position in blocks, not a ring of their window"},
    {{"--sliding-window"}, true, "attention window in tokens (0: off; default: the model's)"},
    {{"--kv-disk"},
     true,
     "save full prefix KV blocks under DIR and read them back instead of recomputing (across "
     "restarts and processes sharing DIR)"},
    {{"--kv-disk-budget"},
     true,
     "bytes of --kv-disk files at most, least recently used removed first (at least 1M; default "
     "10G or half the free space, whichever is less; a budget over the free space is kept, with "
     "a warning)"},
    {{"--mlock"},
     false,
     "lock the weights in memory (refused when they exceed the available memory)"},
    {{"--show-special"},
     false,
     "render generated control, unknown and unused tokens as their text (default: not rendered)"},
};

// run, chat, bench: one adapter for every sequence (serve has its own --lora NAME=FILE).
extern const OptionSpec kLoraSpec;
const OptionSpec kLoraSpec = {
    {"--lora"},
    true,
    "a LoRA adapter (llama.cpp's GGUF adapter file) applied at run time: FILE or FILE:SCALE"};

// Speculative decoding (run, chat, bench).
extern const std::vector<OptionSpec> kSpecSpecs;
const std::vector<OptionSpec> kSpecSpecs = {
    {{"--spec"},
     true,
     "speculative decoding: ngram (prompt lookup), draft (a draft model), mtp (the model's own "
     "prediction layers) or off (default off)"},
    {{"--draft-model"}, true, "the draft model of --spec draft (same vocabulary, smaller)"},
    {{"--spec-max"},
     true,
     "drafted tokens per step at most, 1..16 (default 8; fewer, or none, when they do not pay)"},
    {{"--spec-fixed"},
     false,
     "always draft --spec-max tokens (no adaptive choice; a seed then reproduces sampled output)"},
};

extern const std::vector<OptionSpec> kGrammarSpecs;
const std::vector<OptionSpec> kGrammarSpecs = {
    {{"--json-schema"}, true, "constrain the output to a JSON Schema (a file)"},
    {{"--grammar-file"}, true, "constrain the output to a GBNF grammar (a file)"},
    {{"--json"}, false, "constrain the output to a JSON object"},
};

// The grammar asked for on the command line: read and checked now (before the model loads),
// compiled for the vocabulary by CompileGrammarOption once the engine exists.
GrammarOption ReadGrammarOption(const Args& args) {
  GrammarOption g;
  const int n = args.Has("--json-schema") + args.Has("--grammar-file") + args.Has("--json");
  if (n > 1) throw UsageError("give one of --json-schema, --grammar-file and --json");
  if (n == 0) return g;
  g.on = true;
  if (args.Has("--json")) {
    g.kind = GrammarKind::kJsonObject;
    return g;
  }
  const bool schema = args.Has("--json-schema");
  const std::string path = args.Str(schema ? "--json-schema" : "--grammar-file");
  g.kind = schema ? GrammarKind::kJsonSchema : GrammarKind::kGbnf;
  try {
    g.text = ReadFileToString(path);
    GrammarGbnf(g.kind, g.text);
  } catch (const Error& e) {
    throw UsageError(std::string(schema ? "--json-schema " : "--grammar-file ") + path + ": " +
                     e.what());
  }
  return g;
}

void AddSpecOptions(const Args& args, EngineOptions* eo) {
  eo->spec = args.Str("--spec", "off");
  if (eo->spec != "off" && eo->spec != "ngram" && eo->spec != "draft" && eo->spec != "mtp")
    throw UsageError("unknown --spec '" + eo->spec + "' (expected ngram, draft, mtp or off)");
  eo->draft_model = args.Str("--draft-model");
  if (eo->spec == "draft" && eo->draft_model.empty())
    throw UsageError("--spec draft needs --draft-model FILE");
  if (eo->spec != "draft" && !eo->draft_model.empty())
    throw UsageError("--draft-model is only used with --spec draft");
  eo->spec_max = static_cast<int>(args.Int("--spec-max", 8, 1, 16));
  eo->spec_fixed = args.Has("--spec-fixed");
}

// --no-tune (run, chat, bench, serve): the tune cache (cmd_tune.cpp) is not read.
const OptionSpec kNoTuneSpec = {
    {"--no-tune"},
    false,
    "ignore the tune cache written by paddock tune (default threads, step, matmul blocks and "
    "prefetch)"};
const OptionSpec kIsaSpec = {{"--isa"},
                             true,
                             "kernels: auto, scalar; x86-64: avx2, avx512, amx (AVX-512 with the "
                             "integer GEMMs on AMX tiles); AArch64: neon, dotprod (SDOT), i8mm "
                             "(SMMLA) (default auto: the best this CPU runs)"};
std::string IsaArg(const Args& args) {
  const std::string isa = args.Str("--isa", "auto");
  for (const char* name : {"auto", "scalar", "avx2", "avx512", "amx", "neon", "dotprod", "i8mm"})
    if (isa == name) return isa;
  throw UsageError("unknown ISA '" + isa +
                   "' for --isa (expected auto, scalar, avx2, avx512, amx, neon, dotprod or "
                   "i8mm)");
}
const OptionSpec kPrefetchSpec = {
    {"--prefetch"},
    true,
    "software prefetch of the weight stream: auto (the kinds "
    "measured to gain on this ISA: all on AVX-512), all, off (default: auto, or what paddock "
    "tune chose)"};

// The optimization switches (each on by default, off to measure its gain alone).
extern const std::vector<OptionSpec> kTuningSpecs;  // shared with bench
const std::vector<OptionSpec> kTuningSpecs = {
    kNoTuneSpec,
    {{"--no-fuse-qkv"}, false, "separate Q, K, V projection passes (to measure the fusion)"},
    {{"--no-fuse-ffn"}, false, "separate gate, up and SwiGLU passes (to measure the fusion)"},
    {{"--no-fuse-attn"}, false, "two-pass attention per head (to measure the fused kernel)"},
    {{"--no-fuse-norm"}, false, "separate residual add, norm and activation quantization passes"},
    {{"--no-relayout"},
     false,
     "weights in their file layout (no re-layout for the integer kernels at load)"},
    {{"--no-hugepages"}, false, "re-laid weights on ordinary 4 KiB pages (to measure huge pages)"},
    kPrefetchSpec,
    {{"--no-prefetch"}, false, "no software prefetch of the weight stream (--prefetch off)"},
    {{"--no-bf16-dot"},
     false,
     "BF16 weights: fp32 activations and FMAs instead of bf16 products (AVX-512 BF16, Arm BF16)"},
    {{"--encoder-bf16"},
     false,
     "an embedding encoder's F16 matrices as BF16 where the CPU has the AVX-512 BF16 dot "
     "product: 1.2-1.5x faster, embeddings within ~1e-4 cosine of F16's (default: the file's "
     "F16)"},
    {{"--no-bf16-prefill"},
     false,
     "long prompts on the integer tile GEMM too (default: the AMX-BF16 one where the CPU has "
     "it)"},
    {{"--no-int8-act"},
     false,
     "float activations for quantized weights (default: int8 dot products)"},
    {{"--no-prune-last"},
     false,
     "the last layer computes every prompt token's attention and FFN (default: only the rows "
     "whose logits a step needs)"},
    {{"--no-chunked-delta"},
     false,
     "hybrid models: a prompt's Gated DeltaNet token by token (default: in chunks of 64)"},
};

// --trace FILE (run, bench, serve): checked writable here, before any work.
extern const OptionSpec kTraceSpec;
const OptionSpec kTraceSpec = {
    {"--trace"},
    true,
    "write a Chrome trace (Perfetto, chrome://tracing) of every operator per thread, the engine "
    "steps and requests to FILE at exit"};

void AddTraceOption(const Args& args, EngineOptions* eo) {
  if (!args.Has("--trace")) return;
  const std::string path = args.Str("--trace");
  FILE* f = path.empty() ? nullptr : std::fopen(path.c_str(), "a");
  if (f == nullptr) throw UsageError("--trace: cannot write '" + path + "'");
  std::fclose(f);
  eo->trace_path = path;
}

void AddPrefetchOption(const Args& args, EngineOptions* eo) {
  if (args.Has("--prefetch")) SetPrefetch(args.Str("--prefetch"), eo);
}

void SetPrefetch(const std::string& v, EngineOptions* eo) {
  if (v != "off" && v != "auto" && v != "all")
    throw UsageError("--prefetch: '" + v + "' is not one of auto, all, off");
  eo->prefetch = v != "off";
  eo->prefetch_all = v == "all";
}

const char* PrefetchName(const EngineOptions& eo) {
  return kPrefetchNames[!eo.prefetch ? 0 : (eo.prefetch_all ? 2 : 1)];
}

void AddTuningOptions(const Args& args, EngineOptions* eo) {
  // --no-fuse-qkv, --no-int8-act, ...: each switch of the forward pass by its name.
  eo->forward.ForEachSwitch(
      [&](const char* name, bool& on) { on = !args.Has(std::string("--no-") + name); });
  eo->relayout_weights = !args.Has("--no-relayout");
  eo->encoder_bf16 = args.Has("--encoder-bf16");
  eo->huge_pages = !args.Has("--no-hugepages");
  if (args.Has("--prefetch") && args.Has("--no-prefetch"))
    throw UsageError("--prefetch and --no-prefetch: give one");
  if (args.Has("--no-prefetch")) SetPrefetch("off", eo);
  AddPrefetchOption(args, eo);
}

namespace {

const std::vector<OptionSpec> kSpecs = RunSpecs();

std::vector<OptionSpec> RunSpecs() {
  std::vector<OptionSpec> s = {
      {{"-m", "--model"}, true, "model file: GGUF or llama2.c checkpoint (required)"},
      {{"-z", "--tokenizer"}, true, "tokenizer file (llama2.c tokenizer.bin or vocabulary GGUF)"},
      {{"-p", "--prompt"}, true, "prompt text (default: empty, generation starts from BOS)"},
      {{"-f", "--file"}, true, "read the prompt from a file"},
      {{"--mmproj"}, true, "a vision projector (llama.cpp's mmproj GGUF) for the model: images in"},
      {{"--image"},
       true,
       "an image (PNG, JPEG, WebP, GIF) for the prompt, at <__media__> in it or else before it; "
       "needs --mmproj"},
      {{"--image-bf16"},
       false,
       "the projector's F16/F32 matrices as BF16 on the BF16 dot product (AVX-512 BF16 CPUs; "
       "faster, results within ~6e-3 of the F16 GEMM's)"},
      {{"--image-embeddings"},
       true,
       "with --image: also write the image's embeddings (float32, tiles in prompt order, tokens x "
       "model dim) to this file"},
      {{"-n", "--n-predict"}, true, "tokens to generate (default 256)"},
      {{"--temp"}, true, "temperature, 0 = greedy (default 0.8)"},
      {{"--top-k"}, true, "top-k, 0 = off (default 40)"},
      {{"--top-p"}, true, "top-p, 1 = off (default 0.95)"},
      {{"--min-p"}, true, "min-p, 0 = off (default 0.05)"},
      {{"--repeat-penalty"}, true, "repetition penalty, 1 = off (default 1)"},
      {{"--repeat-last-n"}, true, "tokens the penalties look back over (default 64)"},
      {{"--frequency-penalty"}, true, "frequency penalty (default 0)"},
      {{"--presence-penalty"}, true, "presence penalty (default 0)"},
      {{"--seed"}, true, "random seed (default 24301)"},
      {{"--stop"}, true, "stop string (repeatable)", true},
      {{"--ignore-eos"}, false, "keep generating past end-of-sequence"},
      {{"--no-bos"}, false, "do not prepend BOS to the prompt"},
      {{"--special"}, false, "parse control tokens written in the prompt"},
      {{"--show-grammar"}, false, "print the GBNF a --json-schema or --json becomes, then exit"},
      {{"-t", "--threads"}, true, "threads (default: one per physical core)"},
      {{"-c", "--ctx"}, true, "context (KV capacity) in tokens (default: model's, at most 4096)"},
      kIsaSpec,
      {{"-h", "--help"}, false, "show this help"},
  };
  s.insert(s.end(), kKvSpecs.begin(), kKvSpecs.end());
  s.push_back(kLoraSpec);
  s.insert(s.end(), kSpecSpecs.begin(), kSpecSpecs.end());
  s.insert(s.end(), kGrammarSpecs.begin(), kGrammarSpecs.end());
  s.insert(s.end(), kTuningSpecs.begin(), kTuningSpecs.end());
  s.insert(s.end(), PipelineSpecs().begin(), PipelineSpecs().end());
  s.push_back(kTraceSpec);
  return s;
}

}  // namespace

uint64_t ParseBytes(const std::string& flag, const std::string& s) {
  if (!s.empty() && s.back() == '%') {
    char* end = nullptr;
    const double pct = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() - 1 || !(pct > 0 && pct <= 100))
      throw Error("invalid share '" + s + "' for " + flag + " (e.g. 30%)");
    const uint64_t avail = AvailableMemoryBytes();
    if (avail == 0) throw Error("cannot read the available memory for " + flag + " " + s);
    return static_cast<uint64_t>(static_cast<double>(avail) * pct / 100.0);
  }
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  std::string unit = end != nullptr ? std::string(end) : "";
  double mul = 1;
  if (unit == "" || unit == "B")
    mul = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k")
    mul = 1024.0;
  else if (unit == "M" || unit == "MiB")
    mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mul = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TiB")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else
    throw Error("invalid size '" + s + "' for " + flag + " (e.g. 65536, 64M, 1.5G, 2T)");
  if (s.empty() || end == s.c_str() || !(v > 0) || v * mul > 1e18)
    throw Error("invalid size '" + s + "' for " + flag + " (e.g. 65536, 64M, 1.5G, 2T)");
  if (v * mul < 1)
    throw Error("invalid size '" + s + "' for " + flag +
                ": less than a byte (a unit is K, M, G or T: 0.5G)");
  return static_cast<uint64_t>(v * mul);
}

void AddKvOptions(const Args& args, EngineOptions* eo) {
  eo->device = args.Str("--device", "cpu");
  VulkanDeviceIndex(eo->device);  // (an unknown name: an error naming it)
  if (args.Has("--device-memory")) {
    if (VulkanDeviceIndex(eo->device) < 0)
      throw UsageError("--device-memory is for --device vulkan");
    eo->device_memory = ParseBytes("--device-memory", args.Str("--device-memory"));
  }
  if (args.Has("--gpu-layers")) {
    if (VulkanDeviceIndex(eo->device) < 0) throw UsageError("--gpu-layers is for --device vulkan");
    eo->gpu_layers = static_cast<int>(args.Int("--gpu-layers", -1, 1, 1 << 16));
  }
  eo->render_special = args.Has("--show-special");
  eo->mlock = args.Has("--mlock");
  if (args.Has("--kv-memory")) eo->kv_memory = ParseBytes("--kv-memory", args.Str("--kv-memory"));
  eo->kv_block_size = static_cast<int>(args.Int("--kv-block-size", 16, 1, 4096));
  eo->state_slots = static_cast<int>(args.Int("--state-slots", 0, 1, 4096));
  eo->state_snapshot_every = static_cast<int>(args.Int("--state-snapshot-every", 8, 0, 1 << 20));
  eo->state_snapshots = static_cast<int>(args.Int("--state-snapshots", 8, 0, 4096));
  eo->cache_type_k = args.Str("--cache-type-k", "f16");
  eo->cache_type_v = args.Str("--cache-type-v", "f16");
  for (const auto& t : {eo->cache_type_k, eo->cache_type_v}) {
    if (t != "f32" && t != "f16" && t != "bf16" && t != "int8" && t != "int4") {
      throw Error("unknown KV cache type '" + t + "' (expected f32, f16, bf16, int8 or int4)");
    }
  }
  eo->kv_layer_types = args.Str("--kv-layer-types");
  eo->prefix_cache = !args.Has("--no-prefix-cache");
  eo->kv_rings = !args.Has("--no-kv-ring");
  eo->sliding_window = static_cast<int>(args.Int("--sliding-window", -1, 0, 1 << 24));
  eo->kv_disk = args.Str("--kv-disk");
  if (args.Has("--kv-disk-budget")) {
    if (eo->kv_disk.empty()) throw UsageError("--kv-disk-budget needs --kv-disk DIR");
    eo->kv_disk_budget = ParseBytes("--kv-disk-budget", args.Str("--kv-disk-budget"));
    if (eo->kv_disk_budget < (uint64_t{1} << 20))
      throw UsageError("--kv-disk-budget " + args.Str("--kv-disk-budget") +
                       ": at least 1M (a block file alone is tens of KB to MBs)");
  }
}

// run, chat, bench: --lora FILE or FILE:SCALE (a path may hold ':'; the scale is a number).
void AddLoraOption(const Args& args, EngineOptions* eo) {
  if (!args.Has("--lora")) return;
  try {
    ParseLoraArg(args.Str("--lora"), &eo->lora_path, &eo->lora_scale);
  } catch (const Error& e) {
    throw UsageError(std::string("--lora ") + e.what());
  }
}

void PrintMemory(const Engine& e) {
  const MemoryReport m = e.Memory();
  std::fprintf(stderr,
               "paddock: memory: weights %s, KV %s allocated (%lld blocks of %d tokens, %s/token), "
               "scratch %s; prefix cache %lld/%lld blocks hit\n",
               FormatBytes(m.weight_bytes).c_str(), FormatBytes(m.kv_allocated_bytes).c_str(),
               (long long)m.kv_total_blocks, m.kv_block_size,
               FormatBytes(m.kv_bytes_per_token).c_str(), FormatBytes(m.scratch_bytes).c_str(),
               (long long)m.prefix_hits, (long long)m.prefix_queries);
  if (m.spec_bytes > 0)
    std::fprintf(stderr, "paddock: memory: speculation %s (the drafter's own)\n",
                 FormatBytes(m.spec_bytes).c_str());
  if (m.kv_state_slots > 0)
    std::fprintf(stderr,
                 "paddock: memory: sequence states (recurrent layers, windowed layers' rings) %d + "
                 "%d snapshots x %s (in the KV allocation); %d snapshots held\n",
                 m.kv_state_slots, m.kv_state_snapshot_slots, FormatBytes(m.kv_state_bytes).c_str(),
                 m.kv_state_snapshots);
}

namespace {

// Sampling, length and stop strings from the flags (Error: a bad value).
void ReadGenerateFlags(const Args& args, GenerateOptions* go) {
  go->max_tokens = static_cast<int>(args.Int("-n", 256, 0, 1 << 24));
  SamplingParams& sp = go->sampling;
  sp.temperature = static_cast<float>(args.Float("--temp", 0.8, 0, 100));
  sp.top_k = static_cast<int>(args.Int("--top-k", 40, 0, 1 << 24));
  sp.top_p = static_cast<float>(args.Float("--top-p", 0.95, 1e-6, 1));
  sp.min_p = static_cast<float>(args.Float("--min-p", 0.05, 0, 1));
  sp.repeat_penalty = static_cast<float>(args.Float("--repeat-penalty", 1.0, 1e-3, 100));
  sp.penalty_last_n = static_cast<int>(args.Int("--repeat-last-n", 64, 0, 1 << 24));
  sp.frequency_penalty = static_cast<float>(args.Float("--frequency-penalty", 0, -2, 2));
  sp.presence_penalty = static_cast<float>(args.Float("--presence-penalty", 0, -2, 2));
  sp.seed = args.U64("--seed", sp.seed);
  go->stop = args.All("--stop");
  for (const auto& s : go->stop) {
    if (s.empty()) throw Error("--stop needs a non-empty string");
  }
  go->ignore_eos = args.Has("--ignore-eos");
  go->add_bos = !args.Has("--no-bos");
  go->parse_special = args.Has("--special");
}

}  // namespace

std::string ReadWholeFile(const std::string& path, const char* what) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw Error(std::string("cannot open ") + what + " '" + path + "'");
  std::string bytes;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  std::fclose(f);
  return bytes;
}

namespace {

// The prompt: -f FILE's bytes, or -p's text.
std::string ReadPrompt(const Args& args) {
  if (!args.Has("-f")) return args.Str("-p");
  return ReadWholeFile(args.Str("-f"), "prompt file");
}

// --image: the prompt's text with the image's marker where llama.cpp's mtmd tools take it
// (<__media__>), or first.
std::string ImagePrompt(const std::string& prompt) {
  static constexpr std::string_view kMedia = "<__media__>";
  const size_t at = prompt.find(kMedia);
  if (at == std::string::npos) return std::string(kImageMarker) + prompt;
  return prompt.substr(0, at) + std::string(kImageMarker) + prompt.substr(at + kMedia.size());
}

void PrintRunFigures(const GenerateResult& r, const std::string& spec) {
  const double gen_tps = r.decode_seconds > 0 && r.generated_tokens > 1
                             ? (r.generated_tokens - 1) / r.decode_seconds
                             : 0;
  std::fprintf(stderr,
               "paddock: prompt %d tokens in %.3f s (%.1f tok/s); generated %d tokens, %.1f tok/s; "
               "finish: %s\n",
               r.prompt_tokens, r.prompt_seconds,
               r.prompt_seconds > 0 ? r.prompt_tokens / r.prompt_seconds : 0, r.generated_tokens,
               gen_tps, FinishReasonName(r.finish));
  if (spec != "off") {
    std::fprintf(stderr, "paddock: speculation (%s): %d drafted, %d accepted (%.0f%%)\n",
                 spec.c_str(), r.draft_tokens, r.accepted_tokens,
                 r.draft_tokens > 0 ? 100.0 * r.accepted_tokens / r.draft_tokens : 0.0);
  }
}

}  // namespace

namespace {

// Generated text as it comes, to stdout.
bool PrintText(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return true;
}

// run's model, KV, adapter, speculation and generation flags (a bad value: a usage error).
void ReadRunOptions(const Args& args, EngineOptions* eo, GenerateOptions* go) {
  try {
    eo->model_path = args.Str("-m");
    eo->tokenizer_path = args.Str("-z");
    eo->threads = static_cast<int>(args.Int("-t", 0, 1, 1024));
    eo->context = static_cast<int>(args.Int("-c", 0, 1, 1 << 24));
    eo->isa = IsaArg(args);
    AddKvOptions(args, eo);
    AddLoraOption(args, eo);
    AddSpecOptions(args, eo);
    ReadGenerateFlags(args, go);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// The prompt with an image (--image): encoded, its embeddings written where
// --image-embeddings says, then generated after it.
GenerateResult GenerateWithImage(Engine& engine, const Args& args, const std::string& prompt,
                                 const std::string& image, GenerateOptions* go) {
  const ModelInfo& info = engine.info();
  const std::string text = ImagePrompt(prompt);
  std::vector<std::pair<size_t, size_t>> plain;  // without --special: text stays text
  if (!go->parse_special) plain.emplace_back(0, text.size());
  const std::vector<int32_t> ids =
      engine.TokenizeImages(text, go->add_bos, &plain, {image}, &go->images);
  const double enc = engine.EncodeImages(*go->images);
  if (args.Has("--image-embeddings")) {
    const std::string path = args.Str("--image-embeddings");
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) throw Error("cannot write '" + path + "'");
    size_t floats = 0;
    for (const auto& t : engine.ImageEmbeddings(*go->images)) {
      std::fwrite(t.data(), sizeof(float), t.size(), f);
      floats += t.size();
    }
    if (std::fclose(f) != 0) throw Error("cannot write '" + path + "'");
    std::fprintf(stderr, "paddock: wrote %zu image embeddings of %d floats to %s\n",
                 floats / static_cast<size_t>(info.dim), info.dim, path.c_str());
  }
  std::fprintf(stderr, "paddock: image %s encoded in %.3f s; the prompt is %zu tokens\n",
               args.Str("--image").c_str(), enc, ids.size());
  return engine.GenerateTokens(ids, *go, PrintText);
}

}  // namespace

int CmdRun(int argc, char** argv) {
  Args args = [&] {
    try {
      return Args("run", kSpecs, argc, argv);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }();
  if (args.Has("--help")) {
    std::fputs(Usage("run", "-m MODEL [-z TOKENIZER] [-p PROMPT] [-n N] [options]", kSpecs).c_str(),
               stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw UsageError("unexpected argument '" + args.positional()[0] + "'");
  if (!args.Has("-m")) throw UsageError("run needs a model: -m MODEL");
  if (args.Has("-p") && args.Has("-f")) throw UsageError("give the prompt with -p or -f, not both");
  EngineOptions eo;
  GenerateOptions go;
  ReadRunOptions(args, &eo, &go);
  AddTuningOptions(args, &eo);
  AddTraceOption(args, &eo);
  const GrammarOption grammar_opt = ReadGrammarOption(args);
  if (args.Has("--show-grammar")) {
    if (!grammar_opt.on) throw UsageError("--show-grammar needs --json-schema or --json");
    std::fputs(GrammarGbnf(grammar_opt.kind, grammar_opt.text).c_str(), stdout);
    return 0;
  }
  const std::string prompt = ReadPrompt(args);
  if (args.Has("--image-embeddings") && !args.Has("--image"))
    throw UsageError("--image-embeddings goes with --image");
  if (args.Has("--image") && !args.Has("--mmproj"))
    throw UsageError("--image needs --mmproj FILE: the model's vision projector");
  eo.mmproj = args.Str("--mmproj");
  eo.image_bf16 = args.Has("--image-bf16");
  const std::string image =
      args.Has("--image") ? ReadWholeFile(args.Str("--image"), "image") : std::string();
  if (!JoinPipelineIfLaunched(args, &eo, 0)) return 0;  // a stage under mpirun: done
  std::shared_ptr<Progress> load_bar;
  ShowLoadProgress(&eo, &load_bar);
  ApplyTuneCache(args, "", &eo);
  auto engine = Engine::Create(eo);
  const ModelInfo& info = engine->info();
  for (const auto& w : info.warnings) std::fprintf(stderr, "paddock: warning: %s\n", w.c_str());
  std::fprintf(
      stderr,
      "paddock: loaded %s (%s, %s, %.1fM params) in %.3f s; %d threads, %s kernels%s%s, context "
      "%d\n",
      info.path.c_str(), info.arch.c_str(), info.format.c_str(), info.n_params / 1e6,
      engine->load_seconds(), info.threads, info.isa.c_str(), !info.on_device ? "" : ", on ",
      !info.on_device ? "" : info.device.c_str(), info.context);
  if (grammar_opt.on) go.grammar = engine->CompileGrammar(grammar_opt.kind, grammar_opt.text);
  if (engine->has_vision()) std::fprintf(stderr, "paddock: %s\n", engine->vision_info().c_str());
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  const GenerateResult r = image.empty() ? engine->Generate(prompt, go, PrintText)
                                         : GenerateWithImage(*engine, args, prompt, image, &go);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  PrintMemory(*engine);
  PrintRunFigures(r, eo.spec);
  return 0;
}

}  // namespace paddock::cli
