#version 450
// vulkan/shaders/glu.comp: the gated FFN's activation: out = act(gate) * up, act SiLU (0) or
// GELU's tanh form (1), over count elements.
#include "common.glsl"

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t g, u, o;
  uint count, act;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.count) return;
  const float g = Floats(p.g).v[i];
  float a;
  if (p.act == 0) {
    a = g / (1.0 + exp(-g));
  } else {
    a = 0.5 * g * (1.0 + tanh(0.7978845608 * (g + 0.044715 * g * g * g)));
  }
  Floats(p.o).v[i] = a * Floats(p.u).v[i];
}
