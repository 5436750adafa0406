// Elementwise reductions of typed buffers: the arithmetic at the bottom of every ring step.
// 16-bit floats are widened to float32 for the arithmetic and rounded back once per step,
// as NCCL and Gloo do; integer MEAN is a truncating division of the sum.
#pragma once

#include <cstddef>
#include <cstdint>

#include "data_type.h"

namespace tfring {

// dst[i] = a[i] (op) b[i] for i < count. dst may alias a or b.
void reduceInto(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op);

// data[i] /= divisor, for MEAN after a SUM. A no-op for divisor 1.
void divideBy(void* data, size_t count, DataType type, int divisor);

// IEEE half <-> float and bfloat16 <-> float (round to nearest even).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace tfring
