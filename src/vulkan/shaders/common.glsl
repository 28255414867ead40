// vulkan/shaders/common.glsl: what every Paddock shader shares. Buffers are reached by device
// address (VK_KHR_buffer_device_address, core in Vulkan 1.2): each dispatch's push constants
// carry the addresses it reads and writes, so no descriptor set is ever made or bound.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Words { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Ints { int v[]; };

#define WG 64
shared float red_[WG];

// The sum (or maximum) of every invocation's v over the workgroup of WG; every invocation gets
// it. Calls must be reached by the whole workgroup.
float WgSum(float v) {
  const uint tid = gl_LocalInvocationID.x;
  red_[tid] = v;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) red_[tid] += red_[tid + s];
    barrier();
  }
  const float r = red_[0];
  barrier();
  return r;
}

float WgMax(float v) {
  const uint tid = gl_LocalInvocationID.x;
  red_[tid] = v;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) red_[tid] = max(red_[tid], red_[tid + s]);
    barrier();
  }
  const float r = red_[0];
  barrier();
  return r;
}

// Half-precision element i of a buffer of packed halves.
float HalfAt(Words b, uint i) {
  const uint w = b.v[i >> 1];
  return unpackHalf2x16((i & 1u) != 0u ? w >> 16 : w).x;
}
