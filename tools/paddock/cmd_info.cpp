// info, tokenize and synth subcommands.
#include <algorithm>
#include <cstdio>
#include <string>

#include "args.h"
#include "base/mapped_file.h"
#include "base/strings.h"
#include "base/timer.h"
#include "commands.h"
#include "formats/ggml_types.h"
#include "paddock/paddock.h"
#include "synth/synth.h"

namespace paddock::cli {

namespace {

Args ParseOrUsage(const std::string& cmd, const std::vector<OptionSpec>& specs, int argc,
                  char** argv) {
  try {
    return Args(cmd, specs, argc, argv);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

const std::vector<OptionSpec> kInfoSpecs = {
    {{"-z", "--tokenizer"}, true, "tokenizer file for a llama2.c checkpoint"},
    {{"--devices"},
     false,
     "list the devices a model can run on (--device): the CPU and each Vulkan device"},
    {{"-h", "--help"}, false, "show this help"},
};

void PrintDevices() {
  const std::vector<DeviceInfo> devs = ListDevices();
  for (const DeviceInfo& d : devs) {
    std::printf("%-10s %s (%s)\n", d.id.c_str(), d.name.c_str(), d.type.c_str());
    std::printf("           memory %s; %s\n", FormatBytes(d.memory).c_str(), d.driver.c_str());
    if (d.id != "cpu")
      std::printf("           subgroup %u; integer dot product %s; cooperative matrix %s%s%s\n",
                  d.subgroup, d.int_dot ? "yes" : "no", d.coop_matrix ? "yes" : "no",
                  d.usable ? "" : "; unusable: lacks ", d.missing.c_str());
  }
  if (devs.size() == 1)
    std::printf(
        "(no Vulkan device: install a GPU's Vulkan driver, or Mesa's software device: "
        "apt-get install mesa-vulkan-drivers)\n");
}

const std::vector<OptionSpec> kTokSpecs = {
    {{"-m", "--model"}, true, "model or vocabulary file (GGUF, or llama2.c with -z)"},
    {{"-z", "--tokenizer"}, true, "tokenizer file (tokenizer.bin or vocabulary GGUF)"},
    {{"-f", "--file"}, true, "tokenize the exact bytes of a file"},
    {{"--ids"}, false, "print only the ids, space-separated, on one line"},
    {{"--add-bos"}, false, "prepend the BOS token"},
    {{"--special"}, false, "parse control tokens written in the text"},
    {{"--bench"},
     false,
     "print only the token count and the tokenizing speed (one thread; median of 5 runs)"},
    {{"-h", "--help"}, false, "show this help"},
};

const std::vector<OptionSpec> kSynthSpecs = {
    {{"--shape"},
     true,
     "tiny, tiny-moe, tiny-gpt-oss, stories260k, tinyllama, llama2-7b, llama3-8b, mistral-7b, "
     "qwen2-0.5b; Gemma 4: gemma4-e2b (tests: tiny-gemma4, tiny-gemma4-moe); "
     "hybrid recurrent: qwen3.5-0.8b, qwen3.5-0.8b-mtp (with its prediction layer), lfm2-350m "
     "(tests: tiny-qwen35, tiny-qwen35moe, tiny-qwen35-mtp, tiny-qwen35moe-mtp, tiny-lfm2); "
     "mixtures of experts at real shapes: olmoe-1b-7b, qwen3-30b-a3b, qwen1.5-moe-a2.7b, "
     "mixtral-8x7b, gpt-oss-20b; vision-language (with --mmproj): tiny-llava, tiny-gemma3, "
     "tiny-smolvlm, llava-1.5-7b, gemma3-4b, smolvlm-256m; retrieval encoders: bge-small, "
     "bge-base, nomic-embed, bge-reranker (tests: tiny-bert, tiny-nomic, tiny-reranker) "
     "(default tinyllama)"},
    {{"--mmproj"},
     true,
     "a vision-language shape: where to write its projector (mmproj) GGUF; --type applies to "
     "the text model, --mmproj-type (default f16) to the encoder's matrices"},
    {{"--mmproj-type"}, true, "the projector's matrix type: f32, f16, bf16, q8_0"},
    {{"--type"},
     true,
     "weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, "
     "iq4_nl, iq4_xs, mxfp4, "
     "q4_k_m (Q4_K "
     "with Q6_K where llama.cpp's Q4_K_M puts it), q3_k_m and q2_k_m (llama.cpp's Q3_K_M and "
     "Q2_K file mixes) (default q4_0; f16 for the encoders)"},
    {{"-o", "--output"}, true, "output GGUF path (required)"},
    {{"--layers"}, true, "override the number of layers"},
    {{"--ctx"}, true, "override the context length"},
    {{"--sliding-window"}, true, "declare an attention window (Mistral-style)"},
    {{"--seed"}, true, "random seed (default 1)"},
    {{"--dense-type"},
     true,
     "a mixture of experts: the matrices outside the experts (attention, embeddings, output) in "
     "this type, e.g. --type mxfp4 --dense-type q8_0 as gpt-oss files are"},
    {{"--active-layers"},
     true,
     "only the first N layers act (the rest: zero output projections); with --layers N the same "
     "function: a draft for speculative decoding"},
    {{"--lora-for"},
     true,
     "write a LoRA adapter (llama.cpp's GGUF adapter layout, random F32 pairs) for this GGUF "
     "model instead of a model"},
    {{"--rank"}, true, "the adapter's rank with --lora-for (default 16)"},
    {{"--vocab-from"},
     true,
     "encoder shapes: take the WordPiece vocabulary of this GGUF (e.g. llama.cpp's "
     "ggml-vocab-bert-bge.gguf) instead of the synthetic one"},
    {{"-h", "--help"}, false, "show this help"},
};

}  // namespace

int CmdInfo(int argc, char** argv) {
  Args args = ParseOrUsage("info", kInfoSpecs, argc, argv);
  if (args.Has("--help")) {
    std::fputs(Usage("info", "MODEL [-z TOKENIZER] | --devices", kInfoSpecs).c_str(), stdout);
    return 0;
  }
  if (args.Has("--devices")) {
    if (!args.positional().empty()) throw UsageError("info --devices takes no model");
    PrintDevices();
    return 0;
  }
  if (args.positional().size() != 1) throw UsageError("info needs exactly one model file");
  const ModelInfo i = InspectModel(args.positional()[0], args.Str("-z"));
  std::printf("file:            %s (%s)\n", i.path.c_str(), i.format.c_str());
  std::printf("architecture:    %s%s%s\n", i.arch.c_str(),
              i.name.empty() ? "" : "  name: ", i.name.c_str());
  std::printf("parameters:      %lld (%.2f M)\n", (long long)i.n_params, i.n_params / 1e6);
  if (i.kind != ModelKind::kGeneration)  // an encoder: what it serves, and how it pools
    std::printf(
        "serves:          %s (%s pooling; bidirectional encoder)\n",
        i.kind == ModelKind::kRerank ? "rerank scores (/v1/rerank)" : "embeddings (/v1/embeddings)",
        i.pooling.empty() ? "mean" : i.pooling.c_str());
  if (i.n_experts > 0) {
    std::printf("active:          %lld (%.2f M) per token: %d of %d experts of FFN %d%s\n",
                (long long)i.n_active_params, i.n_active_params / 1e6, i.n_experts_used,
                i.n_experts, i.expert_ffn_dim,
                i.shared_ffn_dim > 0
                    ? StrFormat(", a shared expert of FFN %d", i.shared_ffn_dim).c_str()
                    : "");
  }
  std::printf("shape:           dim %d, %d layers, %d heads (%d KV, head %d%s), FFN %s, vocab %d\n",
              i.dim, i.n_layers, i.n_heads, i.n_kv_heads, i.head_dim,
              i.head_dim_local > 0 && i.head_dim_local != i.head_dim
                  ? StrFormat("; local layers %d", i.head_dim_local).c_str()
                  : "",
              i.ffn_dim_min > 0 && i.ffn_dim_min != i.ffn_dim
                  ? StrFormat("%d-%d", i.ffn_dim_min, i.ffn_dim).c_str()
                  : std::to_string(i.ffn_dim).c_str(),
              i.n_vocab);
  std::printf("attention:       %s, RoPE base %g, %s, scaling %s, sliding window %s\n",
              i.n_kv_heads == i.n_heads ? "multi-head"
                                        : (i.n_kv_heads == 1 ? "multi-query" : "grouped-query"),
              i.rope_base, i.rope_style.c_str(), i.rope_scaling.c_str(),
              i.sliding_window > 0 ? std::to_string(i.sliding_window).c_str() : "none");
  std::printf("features:        QKV bias %s, QK-norm %s, tied embeddings %s\n",
              i.qkv_bias ? "yes" : "no", i.qk_norm ? "yes" : "no",
              i.tied_embeddings ? "yes" : "no");
  std::printf("trained context: %d tokens\n", i.trained_context);
  std::printf("tensor types:   ");
  for (const auto& t : i.tensor_types)
    std::printf(" %s x%d (%s)", t.type.c_str(), t.tensors, FormatBytes(t.bytes).c_str());
  std::printf("\n");
  std::printf("weights memory:  %s", FormatBytes(i.weight_bytes).c_str());
  if (i.n_experts > 0 || i.per_layer_table_bytes > 0 || i.nextn_bytes > 0)
    std::printf(" (read per token: %s)", FormatBytes(i.active_weight_bytes).c_str());
  std::printf("\n");
  if (i.per_layer_table_bytes > 0)
    std::printf(
        "per-layer embd:  %s, memory-mapped, a row per token (not in fast memory; %s are)\n",
        FormatBytes(i.per_layer_table_bytes).c_str(),
        FormatBytes(i.weight_bytes - i.per_layer_table_bytes).c_str());
  if (!i.layer_kinds.empty()) std::printf("layers:          %s\n", i.layer_kinds.c_str());
  if (i.nextn_layers > 0)
    std::printf(
        "prediction:      %d multi-token-prediction layer%s (%s; --spec mtp drafts with it)\n",
        i.nextn_layers, i.nextn_layers > 1 ? "s" : "", FormatBytes(i.nextn_bytes).c_str());
  std::printf(
      "KV cache:        %s per 1,000 tokens of context (f16 K and V, %s)\n",
      FormatBytes(i.kv_bytes_per_1k_tokens).c_str(),
      !i.layer_kinds.empty()
          ? StrFormat("the %d attention layers; the others keep a state", i.kv_layers).c_str()
      : i.kv_layers < i.n_layers
          ? StrFormat("%d of %d layers store it%s; the rest share theirs", i.kv_layers, i.n_layers,
                      i.kv_ring > 0 ? ", the windowed ones in rings (below)" : "")
                .c_str()
          : "all layers");
  if (i.kv_ring > 0)
    std::printf(
        "windowed layers: %s per sequence, a ring of %d positions each (window and a step; "
        "--no-kv-ring: blocks of every position)\n",
        FormatBytes(i.kv_ring_bytes).c_str(), i.kv_ring);
  if (i.state_bytes > 0)
    std::printf("recurrent state: %s per sequence (a slot each, in the KV budget)\n",
                FormatBytes(i.state_bytes).c_str());
  return 0;
}

int CmdTokenize(int argc, char** argv) {
  Args args = ParseOrUsage("tokenize", kTokSpecs, argc, argv);
  if (args.Has("--help")) {
    std::fputs(
        Usage("tokenize", "-m MODEL [-z TOKENIZER] [--ids] [--add-bos] (TEXT | -f FILE)", kTokSpecs)
            .c_str(),
        stdout);
    return 0;
  }
  if (!args.Has("-m")) throw UsageError("tokenize needs a model or vocabulary: -m FILE");
  std::string text;
  if (args.Has("-f")) {
    if (!args.positional().empty())
      throw UsageError("give the text as an argument or with -f, not both");
    text = ReadFileToString(args.Str("-f"));
  } else {
    if (args.positional().size() != 1)
      throw UsageError("tokenize needs one TEXT argument (or -f FILE)");
    text = args.positional()[0];
  }
  std::unique_ptr<Vocabulary> vocab;
  if (args.Has("-z")) {
    // Check that the tokenizer belongs to the model before using it.
    InspectModel(args.Str("-m"), args.Str("-z"));
    vocab = Vocabulary::Load(args.Str("-z"));
  } else {
    vocab = Vocabulary::Load(args.Str("-m"));
  }
  if (args.Has("--bench")) {
    std::vector<double> secs;
    size_t n = 0;
    for (int r = 0; r < 5; ++r) {
      const double t0 = NowSeconds();
      n = vocab->Tokenize(text, args.Has("--add-bos"), args.Has("--special")).size();
      secs.push_back(NowSeconds() - t0);
    }
    std::sort(secs.begin(), secs.end());
    std::printf(
        "{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.4f, \"mb_per_s\": %.2f, "
        "\"tokens_per_s\": %.0f}\n",
        text.size(), n, secs[2], static_cast<double>(text.size()) / secs[2] / 1e6,
        static_cast<double>(n) / secs[2]);
    return 0;
  }
  const auto ids = vocab->Tokenize(text, args.Has("--add-bos"), args.Has("--special"));
  if (args.Has("--ids")) {
    std::string line;
    for (size_t k = 0; k < ids.size(); ++k) line += (k ? " " : "") + std::to_string(ids[k]);
    std::printf("%s\n", line.c_str());
  } else {
    for (int32_t id : ids) {
      const std::string_view p = vocab->Piece(id);
      std::printf("%6d '%.*s'\n", id, static_cast<int>(p.size()), p.data());
    }
  }
  return 0;
}

int CmdSynth(int argc, char** argv) {
  Args args = ParseOrUsage("synth", kSynthSpecs, argc, argv);
  if (args.Has("--help")) {
    std::fputs(Usage("synth", "--shape NAME --type TYPE -o FILE", kSynthSpecs).c_str(), stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw UsageError("unexpected argument '" + args.positional()[0] + "'");
  if (!args.Has("-o")) throw UsageError("synth needs an output path: -o FILE");
  if (args.Has("--lora-for")) {
    for (const char* f : {"--shape", "--type", "--layers", "--ctx", "--sliding-window",
                          "--dense-type", "--active-layers"})
      if (args.Has(f)) throw UsageError(std::string(f) + " does not apply to --lora-for");
    const int rank = static_cast<int>(args.Int("--rank", 16, 1, 4096));
    try {
      WriteSyntheticLora(args.Str("--lora-for"), rank, args.U64("--seed", 1), args.Str("-o"));
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    std::fprintf(stderr, "paddock: wrote a rank-%d LoRA adapter for %s to %s\n", rank,
                 args.Str("--lora-for").c_str(), args.Str("-o").c_str());
    return 0;
  }
  if (args.Has("--rank")) throw UsageError("--rank applies to --lora-for");
  SynthSpec spec;
  SynthVisionSpec vision;
  const bool vlm = SynthVisionPreset(args.Str("--shape", "tinyllama"), &spec, &vision);
  if (vlm != args.Has("--mmproj"))
    throw UsageError(vlm ? "shape '" + args.Str("--shape") +
                               "' is a vision-language model: name its projector's file with "
                               "--mmproj FILE"
                         : std::string("--mmproj applies to the vision-language shapes (") +
                               Join(SynthVisionPresetNames(), ", ") + ")");
  if (args.Has("--mmproj-type") && !vlm) throw UsageError("--mmproj-type applies with --mmproj");
  try {
    if (!vlm) spec = SynthPreset(args.Str("--shape", "tinyllama"));
    if (vlm && args.Has("--mmproj-type")) {
      const std::string mt = args.Str("--mmproj-type");
      const TypeTraits* t = FindTypeTraitsByName(mt.c_str());
      if (t == nullptr || (t->type != GgmlType::kF32 && t->type != GgmlType::kF16 &&
                           t->type != GgmlType::kBF16 && t->type != GgmlType::kQ8_0))
        throw Error("--mmproj-type '" + mt + "': one of f32, f16, bf16, q8_0");
      vision.type = t->type;
    }
    const bool encoder = spec.arch == "bert" || spec.arch == "nomic-bert";
    if (args.Has("--vocab-from") && !encoder)
      throw Error("--vocab-from applies to the encoder shapes (bge-small, bge-base, ...)");
    spec.vocab_from = args.Str("--vocab-from");
    // Encoders come as F16 files (llama.cpp's converters' default for them).
    const std::string type = args.Str("--type", encoder ? "f16" : "q4_0");
    spec.q4_k_m = type == "q4_k_m" || type == "Q4_K_M";
    spec.q3_k_m = type == "q3_k_m" || type == "Q3_K_M";
    spec.q2_k_m = type == "q2_k_m" || type == "Q2_K_M";
    const TypeTraits* t = FindTypeTraitsByName(spec.q4_k_m   ? "q4_k"
                                               : spec.q3_k_m ? "q3_k"
                                               : spec.q2_k_m ? "q2_k"
                                                             : type.c_str());
    if (t == nullptr || t->from_float == nullptr)
      throw Error("unknown or unsupported weight type '" + type + "'");
    spec.type = t->type;
    spec.n_layers = static_cast<int>(args.Int("--layers", spec.n_layers, 1, 1024));
    spec.context = static_cast<int>(args.Int("--ctx", spec.context, 1, 1 << 22));
    spec.sliding_window =
        static_cast<int>(args.Int("--sliding-window", spec.sliding_window, 0, 1 << 22));
    spec.seed = args.U64("--seed", 1);
    spec.active_layers = static_cast<int>(args.Int("--active-layers", 0, 0, 1024));
    if (args.Has("--dense-type")) {
      const std::string dt = args.Str("--dense-type");
      const TypeTraits* d = FindTypeTraitsByName(dt.c_str());
      if (d == nullptr || d->from_float == nullptr)
        throw Error("unknown or unsupported dense type '" + dt + "'");
      if (spec.n_experts == 0)
        throw Error("--dense-type is for mixtures of experts; shape '" +
                    args.Str("--shape", "tinyllama") + "' has no experts");
      spec.dense_type = static_cast<int>(d->type);
    }
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  std::fprintf(stderr, "paddock: writing synthetic %s model (%s weights) to %s\n",
               spec.arch.c_str(),
               spec.q4_k_m   ? "Q4_K_M mix"
               : spec.q3_k_m ? "Q3_K_M mix"
               : spec.q2_k_m ? "llama.cpp Q2_K mix"
                             : TypeName(spec.type),
               args.Str("-o").c_str());
  WriteSyntheticModel(spec, args.Str("-o"));
  if (vlm) {
    vision.seed = spec.seed + 6;
    WriteSyntheticMmproj(vision, args.Str("--mmproj"));
    std::fprintf(stderr, "paddock: wrote its %s projector (%s) to %s\n", vision.projector.c_str(),
                 TypeName(vision.type), args.Str("--mmproj").c_str());
  }
  return 0;
}

}  // namespace paddock::cli
