// paddock/forward_options.h: the forward pass's run-time switches, stated once.
//
// Every optimization of the step is a switch here, on by default, so that its factor can be
// measured alone (`paddock ablate`). The engine copies this struct whole into its backend
// (model/backend.h: Backend::Configure) and a pipeline's head sends it whole to its stages
// (ForEach); nothing else lists the fields. None of them changes a result beyond rounding:
// each path is tested against the others.
#pragma once

#include <cstdint>

namespace paddock {

struct ForwardOptions {
  // Integer dot products for Q8_0/Q4_0/Q4_K/Q6_K and the other integer kinds: each matmul input
  // quantized to int8 blocks once.
  bool int8_activations = true;
  bool fuse_qkv = true;   // Q/K/V projections in one parallel pass with their epilogue
  bool fuse_ffn = true;   // gate/up projections + SwiGLU in one parallel pass
  bool fuse_norm = true;  // residual add + norm + int8 quantization in one pass per token
  bool fuse_attn = true;  // attention in one online-softmax pass per KV-head group
  bool bf16_dot = true;   // BF16 weights: bf16 activations, AVX-512 BF16 dot products
  // The prompt tokens of prompts of 64 tokens or more on the bf16 tile GEMM (AMX-BF16, where
  // the CPU has it; the types with an integer tile GEMM): weights and activations rounded to
  // bf16 and summed in fp32, 1.3-1.6x the integer tile GEMM's rate. Generated tokens, short
  // prompts and scoring (perplexity, prompt logprobs) stay on the integer kernels.
  bool bf16_prefill = true;
  // The last layer past its K/V computes only the rows whose logits a step needs (a prompt
  // chunk's last token): the other prompt tokens' last attention and FFN are skipped.
  bool prune_last = true;
  // Hybrid recurrent models: a prompt's Gated DeltaNet runs in whole aligned chunks of 64
  // tokens (KernelTable::delta_chunk: the state read and written once per chunk) instead of
  // token by token. Which tokens take it depends on their positions and the prompt's length
  // only (the scheduler ends prompt chunks on the 64-token boundaries), never on the step.
  bool chunked_delta = true;
  // Weight bytes per row block of the batched int8 matmuls (cache blocking; 0: 64 KiB).
  // `paddock tune` measures it with the batch size and threads for a machine and model shape.
  uint64_t matmul_block_bytes = 0;
  // A Vulkan device's matrix-vector workgroup, invocations (0: 64): decode's shader, a
  // specialization constant; `paddock tune --device vulkan` measures it per device and shape.
  // Each row's sum is the same whatever it is (a subgroup sums a row).
  uint32_t device_matvec_wg = 0;

  // fn(name, field) for each on/off switch, in a fixed order (the pipeline's plan message
  // carries them in it).
  template <class F>
  void ForEachSwitch(F&& fn) {
    fn("int8-act", int8_activations);
    fn("fuse-qkv", fuse_qkv);
    fn("fuse-ffn", fuse_ffn);
    fn("fuse-norm", fuse_norm);
    fn("fuse-attn", fuse_attn);
    fn("bf16-dot", bf16_dot);
    fn("bf16-prefill", bf16_prefill);
    fn("prune-last", prune_last);
    fn("chunked-delta", chunked_delta);
  }
};

}  // namespace paddock
