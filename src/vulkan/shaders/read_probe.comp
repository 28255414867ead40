#version 450
// vulkan/shaders/read_probe.comp: the device's read bandwidth (paddock bench's roofline on a
// device): every invocation sums a strided share of the buffer in 16-byte loads (consecutive
// invocations, consecutive addresses) and writes its sum, so nothing is optimized away.
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { uvec4 v[]; };

layout(local_size_x = WG) in;
layout(push_constant) uniform P {
  uint64_t src, dst;
  uint count;  // 16-byte vectors
} p;

void main() {
  Vec4s S = Vec4s(p.src);
  const uint gid = gl_GlobalInvocationID.x, total = gl_NumWorkGroups.x * WG;
  uvec4 acc = uvec4(0);
  for (uint i = gid; i < p.count; i += total) acc += S.v[i];
  Words(p.dst).v[gid] = acc.x + acc.y + acc.z + acc.w;
}
