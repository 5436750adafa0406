// The element types the collectives move and the reductions they apply. The numbering is part of
// the C API (tfring_allreduce_raw takes them as ints), so values are never reused.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tfring {

enum class DataType : int32_t { kFloat16 = 0, kBFloat16, kFloat32, kFloat64, kInt32, kInt64, kUint8 };
// kAdasum is not elementwise: only the allreduce takes it (algorithms/allreduce_adasum.h).
enum class ReduceOp : int32_t { kSum = 0, kMean, kMin, kMax, kProduct, kAdasum };

// Bytes per element; throws Error(kInvalidArgument) for a value outside the enum (from the C API).
size_t dataTypeSize(DataType t);
const char* dataTypeName(DataType t);
const char* reduceOpName(ReduceOp op);

}  // namespace tfring
