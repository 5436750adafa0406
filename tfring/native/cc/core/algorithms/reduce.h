// Elementwise reductions of typed buffers: the arithmetic at the bottom of every ring step.
// 16-bit floats are widened to float32 for the arithmetic and rounded back once per step,
// as NCCL and Gloo do; integer MEAN is a truncating division of the sum.
//
// MEAN is SUM up to each element's last addition, which reduceMeanInto fuses with the division:
// a 16-bit mean is rounded once, from the float32 sum, as sum / n computed in float32 would be.
// Rounding the sum to 16 bits first and the quotient again is off by one unit at times (float16,
// 3 ranks: 286.875 / 3 = 95.625, but 287 / 3 rounds to 95.6875). Every algorithm's last step
// calls it, on the rank that owns the element, so every rank still ends with the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "data_type.h"

namespace tfring {

// dst[i] = a[i] (op) b[i] for i < count. dst may alias a or b.
void reduceInto(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op);

// dst[i] = (a[i] + b[i]) / divisor: the last addition of a MEAN over `divisor` ranks, with its
// division. 16-bit floats add and divide (truly) in float32 and are rounded once; other types
// keep the bits of sum-then-divide (a true division for floats, truncating for integers).
// Divisor 1: the sum. dst may alias a or b.
void reduceMeanInto(void* dst, const void* a, const void* b, size_t count, DataType type, int divisor);

// IEEE half <-> float and bfloat16 <-> float (round to nearest even).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace tfring
