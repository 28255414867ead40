// kernels/simd/amx_tiles.h: the AMX tile configuration (palette 1, as ldtilecfg reads it),
// shared by the AMX kernels. Internal to the kernels layer.
#pragma once

#include <cstdint>

namespace paddock {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace paddock
