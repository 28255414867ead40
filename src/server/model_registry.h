// server/model_registry.h: `paddock serve --models-dir DIR`: every GGUF file under DIR
// (recursively) as a served model, its id the file's stem, or the name and options an optional
// DIR/models.json gives it:
//
//   {"models": {"chat": {"file": "tinyllama-q4_0.gguf", "aliases": ["gpt-4o-mini"],
//                        "context": 2048, "cache_type_k": "q8_0", "keep_alive": "10m",
//                        "draft_model": "draft.gguf", "chat_template": "chatml",
//                        "mmproj": "mmproj-vlm-f16.gguf",
//                        "loras": {"pirate": "pirate.gguf:0.8"}}}}
//
// Keys: file (relative to DIR; required), aliases, context, kv_memory (bytes, "512M"),
// cache_type_k, cache_type_v, spec (off, ngram, draft, mtp), draft_model, mmproj (a vision
// projector; "": none), chat_template, chat_template_file, keep_alive (Ollama's), loras
// (name -> FILE[:SCALE]). Any other key is an error naming it. A file a models.json entry names
// is served under that entry's id only. Projectors (mmproj*.gguf, as the downloads name them)
// are not models: a model without an "mmproj" key takes the one beside it (the only one in its
// directory, or the one whose name holds the model's stem).
#pragma once

#include <string>
#include <vector>

#include "server/model_host.h"

namespace paddock::server {

// The specs of DIR's models, each starting from `base` (the server's engine options). Throws
// Error for an unreadable directory, a bad models.json, two models with one id (naming both
// files) or an id given twice. A .gguf file that is not a loadable model (not GGUF, an adapter,
// a projector) is reported in *skipped with the reason and left out; so are other files.
std::vector<ModelSpec> ScanModelsDir(const std::string& dir, const EngineOptions& base,
                                     std::vector<std::string>* skipped);

// Fills spec.info, spec.context and spec.estimate from the file (a memory map; throws Error).
void InspectSpec(ModelSpec* spec);

}  // namespace paddock::server
