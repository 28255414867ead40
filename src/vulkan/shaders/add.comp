#version 450
// vulkan/shaders/add.comp: x += y over count elements (the residual stream).
#include "common.glsl"

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t x, y;
  uint count;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i < p.count) Floats(p.x).v[i] += Floats(p.y).v[i];
}
