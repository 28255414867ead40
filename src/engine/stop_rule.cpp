#include "engine/stop_rule.h"

#include "base/strings.h"
#include "engine/sampler.h"
#include "grammar/matcher.h"
#include "model/tokenizer.h"

namespace paddock {

bool IsEndToken(const Tokenizer& tok, int32_t t) {
  return tok.IsEndOfGeneration(t) || t == tok.bos();
}

bool GrammarCompletes(grammar::Matcher& m, int32_t t, bool at_limit) {
  return !m.AcceptToken(t) || m.Done() || (at_limit && m.CanEnd());
}

void ValidatePrompt(const std::vector<int32_t>& prompt, int context, int n_vocab,
                    const GenerateOptions& o) {
  if (prompt.empty()) Fail("empty prompt: nothing to condition on (enable BOS or give text)");
  if (static_cast<int>(prompt.size()) >= context) {
    Fail(
        "the prompt has %zu tokens; the context holds %d (prompt plus at least one generated "
        "token)",
        prompt.size(), context);
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= n_vocab)
      Fail("token id %d is outside the vocabulary (0..%d)", t, n_vocab - 1);
  }
  if (o.max_tokens < 0) Fail("max tokens %d must not be negative", o.max_tokens);
  for (const auto& st : o.stop) {
    if (st.empty()) Fail("stop strings must not be empty");
  }
  ValidateSampling(o.sampling);
}

}  // namespace paddock
