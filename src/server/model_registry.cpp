// server/model_registry.cpp: the models of a directory (model_registry.h).
#include "server/model_registry.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/strings.h"
#include "server/api_json.h"

namespace paddock::server {
namespace fs = std::filesystem;
using api_detail::json;

namespace {

// A size in bytes: a number with an optional K, M, G (powers of 1024) suffix, or a JSON number.
uint64_t Bytes(const json& v, const std::string& where) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (!v.is_string()) Fail("%s: expected a size such as \"512M\"", where.c_str());
  const std::string s = v.get<std::string>();
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  const std::string unit = end != nullptr ? std::string(end) : "";
  const double mul = unit.empty() || unit == "B"    ? 1
                     : unit == "K" || unit == "KiB" ? 1024.0
                     : unit == "M" || unit == "MiB" ? 1024.0 * 1024
                     : unit == "G" || unit == "GiB" ? 1024.0 * 1024 * 1024
                                                    : -1;
  if (end == s.c_str() || mul < 0 || !(x > 0) || x * mul > 1e15)
    Fail("%s: '%s' is not a size (e.g. 65536, 512M, 1.5G)", where.c_str(), s.c_str());
  return static_cast<uint64_t>(x * mul);
}

std::string Str(const json& v, const std::string& where) {
  if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 4096)
    Fail("%s: expected a non-empty string", where.c_str());
  return v.get<std::string>();
}

// One models.json entry onto a spec whose engine options are the server's.
void ApplyEntry(const std::string& dir, const std::string& id, const json& e, ModelSpec* spec) {
  const std::string at = "models.json: model '" + id + "'";
  if (!e.is_object()) Fail("%s: expected an object", at.c_str());
  for (const auto& [key, v] : e.items()) {
    const std::string where = at + " key '" + key + "'";
    if (key == "file") {
      const std::string f = Str(v, where);
      spec->engine.model_path = fs::path(f).is_absolute() ? f : (fs::path(dir) / f).string();
    } else if (key == "aliases") {
      if (!v.is_array()) Fail("%s: expected an array of names", where.c_str());
      for (const json& a : v) spec->aliases.push_back(Str(a, where));
    } else if (key == "context") {
      if (!v.is_number_integer() || v.get<int64_t>() < 16 || v.get<int64_t>() > (1 << 24))
        Fail("%s: expected a context of 16..16777216 tokens", where.c_str());
      spec->engine.context = v.get<int>();
    } else if (key == "kv_memory") {
      spec->engine.kv_memory = Bytes(v, where);
    } else if (key == "cache_type_k") {
      spec->engine.cache_type_k = Str(v, where);
    } else if (key == "cache_type_v") {
      spec->engine.cache_type_v = Str(v, where);
    } else if (key == "spec") {
      spec->engine.spec = Str(v, where);
    } else if (key == "draft_model") {
      const std::string f = Str(v, where);
      spec->engine.draft_model = fs::path(f).is_absolute() ? f : (fs::path(dir) / f).string();
      if (spec->engine.spec == "off") spec->engine.spec = "draft";
    } else if (key == "mmproj") {  // a vision projector: images in prompts ("": none)
      const std::string f = Str(v, where);
      spec->engine.mmproj =
          f.empty() || fs::path(f).is_absolute() ? f : (fs::path(dir) / f).string();
      spec->mmproj_given = true;
    } else if (key == "chat_template") {
      spec->chat_template = Str(v, where);
    } else if (key == "chat_template_file") {
      const std::string f = Str(v, where);
      spec->chat_template_file = fs::path(f).is_absolute() ? f : (fs::path(dir) / f).string();
    } else if (key == "keep_alive") {
      spec->keep_alive = v.is_number() ? v.get<double>() : ParseKeepAlive(Str(v, where));
    } else if (key == "loras") {
      if (!v.is_object()) Fail("%s: expected {\"name\": \"FILE[:SCALE]\"}", where.c_str());
      for (const auto& [name, file] : v.items()) {
        LoraRegistry::Entry a;
        a.name = name;
        ParseLoraArg(Str(file, where + " adapter '" + name + "'"), &a.path, &a.scale);
        if (!fs::path(a.path).is_absolute()) a.path = (fs::path(dir) / a.path).string();
        spec->loras.push_back(std::move(a));
      }
    } else {
      Fail(
          "%s: unknown key '%s' (expected file, aliases, context, kv_memory, cache_type_k, "
          "cache_type_v, spec, draft_model, mmproj, chat_template, chat_template_file, "
          "keep_alive, loras)",
          at.c_str(), key.c_str());
    }
  }
  if (spec->engine.model_path.empty()) Fail("%s: no \"file\"", at.c_str());
}

std::string LowerName(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A vision projector as the downloads name them (llama.cpp's mmproj-*.gguf, Ollama's and LM
// Studio's folders): not a model of its own.
bool IsProjectorFile(const fs::path& f) {
  return f.extension() == ".gguf" && LowerName(f.filename().string()).rfind("mmproj", 0) == 0;
}

// Models without a projector named in models.json get the one lying beside them: the only one
// in their directory, or among several the one whose name holds the model's stem.
void PairProjectors(std::vector<ModelSpec>* specs, const std::vector<fs::path>& projectors,
                    std::vector<std::string>* skipped) {
  for (ModelSpec& s : *specs) {
    if (s.mmproj_given) continue;
    const fs::path model(s.engine.model_path);
    std::vector<fs::path> beside, named;
    for (const fs::path& p : projectors) {
      if (p.parent_path() != model.parent_path()) continue;
      beside.push_back(p);
      if (LowerName(p.filename().string()).find(LowerName(model.stem().string())) !=
          std::string::npos)
        named.push_back(p);
    }
    if (beside.size() == 1) {
      s.engine.mmproj = beside[0].string();
    } else if (named.size() == 1) {
      s.engine.mmproj = named[0].string();
    } else if (!beside.empty()) {
      skipped->push_back(s.engine.model_path + ": served without images (" +
                         std::to_string(beside.size()) +
                         " projectors beside it; name one as \"mmproj\" in models.json)");
    }
  }
}

// Every regular file under dir, sorted (the same ids in the same order every start).
std::vector<fs::path> FilesUnder(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(
           dir, fs::directory_options::follow_directory_symlink, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    files.push_back(it->path());
  }
  if (ec) Fail("--models-dir '%s': %s", dir.c_str(), ec.message().c_str());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

void InspectSpec(ModelSpec* spec) {
  spec->info = InspectModel(spec->engine.model_path, spec->engine.tokenizer_path);
  spec->context =
      spec->engine.context > 0 ? spec->engine.context : std::min(spec->info.trained_context, 4096);
  spec->estimate = EstimateMemory(spec->engine);
}

std::vector<ModelSpec> ScanModelsDir(const std::string& dir, const EngineOptions& base,
                                     std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    Fail("--models-dir '%s' is not a readable directory", dir.c_str());
  std::vector<ModelSpec> specs;
  std::map<std::string, std::string> named_files;  // canonical file -> the models.json id
  const fs::path config = fs::path(dir) / "models.json";
  if (fs::exists(config, ec)) {
    std::ifstream in(config);
    std::stringstream ss;
    ss << in.rdbuf();
    json j;
    try {
      j = json::parse(ss.str());
    } catch (const std::exception& ex) {
      Fail("%s: not valid JSON: %s", config.string().c_str(), ex.what());
    }
    if (!j.is_object() || !j.contains("models") || !j["models"].is_object() || j.size() != 1)
      Fail("%s: expected {\"models\": {\"ID\": {\"file\": ...}, ...}}", config.string().c_str());
    for (const auto& [id, entry] : j["models"].items()) {
      if (id.empty() || id.size() > 256) Fail("models.json: a model id must be 1..256 characters");
      ModelSpec spec;
      spec.id = id;
      spec.engine = base;
      spec.engine.model_path.clear();
      ApplyEntry(dir, id, entry, &spec);
      const std::string canon = fs::weakly_canonical(spec.engine.model_path, ec).string();
      if (!fs::is_regular_file(spec.engine.model_path, ec))
        Fail("models.json: model '%s': no file '%s'", id.c_str(), spec.engine.model_path.c_str());
      named_files[canon] = id;
      specs.push_back(std::move(spec));
    }
  }
  // Every other .gguf file, by its stem; projectors go with the models beside them.
  const std::vector<fs::path> files = FilesUnder(dir);
  std::vector<fs::path> projectors;
  std::map<std::string, std::string> draft_files;  // files used as drafts or adapters
  for (const ModelSpec& s : specs) {
    if (!s.engine.draft_model.empty())
      draft_files[fs::weakly_canonical(s.engine.draft_model, ec).string()] = s.id;
    for (const LoraRegistry::Entry& a : s.loras)
      draft_files[fs::weakly_canonical(a.path, ec).string()] = s.id;
  }
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    if (name == "models.json") continue;
    if (f.extension() != ".gguf") {
      skipped->push_back(f.string() + ": not a .gguf file");
      continue;
    }
    if (IsProjectorFile(f)) {
      projectors.push_back(f);
      continue;
    }
    const std::string canon = fs::weakly_canonical(f, ec).string();
    if (named_files.count(canon) != 0) continue;
    ModelSpec spec;
    spec.id = f.stem().string();
    spec.engine = base;
    spec.engine.model_path = f.string();
    spec.engine.tokenizer_path.clear();
    specs.push_back(std::move(spec));
  }
  PairProjectors(&specs, projectors, skipped);
  // Each file is inspected (metadata only); what does not load as a model is left out with
  // the reason.
  std::vector<ModelSpec> out;
  for (ModelSpec& s : specs) {
    const std::string canon = fs::weakly_canonical(s.engine.model_path, ec).string();
    const bool named = named_files.count(canon) != 0;
    try {
      InspectSpec(&s);
    } catch (const std::exception& ex) {
      if (named) Fail("models.json: model '%s': %s", s.id.c_str(), ex.what());
      if (draft_files.count(canon) == 0)
        skipped->push_back(s.engine.model_path + ": not a model (" + ex.what() + ")");
      continue;
    }
    out.push_back(std::move(s));
  }
  // One id (or alias) per model.
  std::map<std::string, std::string> owner;  // name -> file
  for (const ModelSpec& s : out) {
    std::vector<std::string> names = {s.id};
    names.insert(names.end(), s.aliases.begin(), s.aliases.end());
    for (const std::string& n : names) {
      auto [it, fresh] = owner.emplace(n, s.engine.model_path);
      if (!fresh)
        Fail("--models-dir: two models have the id '%s': %s and %s (name one in models.json)",
             n.c_str(), it->second.c_str(), s.engine.model_path.c_str());
    }
  }
  return out;
}

}  // namespace paddock::server
