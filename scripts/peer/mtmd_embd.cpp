// scripts/peer/mtmd_embd.cpp: image embeddings and encode time from llama.cpp's libmtmd (a
// peer build, ../shared/tools/build-peer.sh), for scripts/vision-agreement and
// scripts/vision-bench: the same files and image through the peer's public API.
//   mtmd_embd MODEL MMPROJ IMAGE OUT.f32 THREADS [REPEAT]
// Writes every image chunk's embeddings (tokens x n_embd floats, prompt order) to OUT.f32 and
// prints "tokens N seconds S" per encode (the median-worthy figure is the encode call alone).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: mtmd_embd MODEL MMPROJ IMAGE OUT.f32 THREADS [REPEAT]\n");
    return 2;
  }
  const int threads = std::atoi(argv[5]);
  const int repeat = argc > 6 ? std::atoi(argv[6]) : 1;
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) return 1;
  mtmd_context_params cp = mtmd_context_params_default();
  cp.use_gpu = false;
  cp.n_threads = threads;
  cp.print_timings = false;
  mtmd_context* ctx = mtmd_init_from_file(argv[2], model, cp);
  if (ctx == nullptr) return 1;
  mtmd_bitmap* bmp = mtmd_helper_bitmap_init_from_file(ctx, argv[3]);
  if (bmp == nullptr) return 1;
  mtmd_input_text text;
  text.text = mtmd_default_marker();
  text.add_special = false;
  text.parse_special = true;
  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  const mtmd_bitmap* bitmaps[1] = {bmp};
  if (mtmd_tokenize(ctx, chunks, &text, bitmaps, 1) != 0) return 1;
  const int n_embd = llama_model_n_embd(model);
  std::FILE* out = std::fopen(argv[4], "wb");
  if (out == nullptr) return 1;
  for (int r = 0; r < repeat; ++r) {
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); ++i) {
      const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks, i);
      if (mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_IMAGE) continue;
      const auto t0 = std::chrono::steady_clock::now();
      if (mtmd_encode_chunk(ctx, c) != 0) return 1;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const size_t n = mtmd_input_chunk_get_n_tokens(c);
      std::printf("tokens %zu seconds %.6f\n", n, s);
      if (r == 0) std::fwrite(mtmd_get_output_embd(ctx), sizeof(float), n * n_embd, out);
    }
  }
  std::fclose(out);
  return 0;
}
