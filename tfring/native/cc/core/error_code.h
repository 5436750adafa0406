// The error codes of the core, defined once. The C API returns a code's value (0 = OK) and
// tfring_error_name() its name, from which Python picks the exception class; the TF glue maps
// codes onto tensorflow::error codes. Values are part of the C API: append, never reorder.
#pragma once

#include <iterator>

namespace tfring {

#define TFRING_ERROR_CODES(X)                     \
  X(kOk, "OK")                                    \
  X(kInvalidArgument, "INVALID_ARGUMENT")         \
  X(kUnavailable, "UNAVAILABLE")                  \
  X(kDeadlineExceeded, "DEADLINE_EXCEEDED")       \
  X(kFailedPrecondition, "FAILED_PRECONDITION")   \
  X(kInternal, "INTERNAL")

enum class Code : int {
#define TFRING_CODE_ENUMERATOR(name, text) name,
  TFRING_ERROR_CODES(TFRING_CODE_ENUMERATOR)
#undef TFRING_CODE_ENUMERATOR
};

// "INVALID_ARGUMENT" for Code::kInvalidArgument, and so on; "UNKNOWN" for a value outside the list.
inline const char* codeName(int code) {
  static constexpr const char* kNames[] = {
#define TFRING_CODE_NAME(name, text) text,
      TFRING_ERROR_CODES(TFRING_CODE_NAME)
#undef TFRING_CODE_NAME
  };
  return code >= 0 && code < static_cast<int>(std::size(kNames)) ? kNames[code] : "UNKNOWN";
}
inline const char* codeName(Code code) { return codeName(static_cast<int>(code)); }

}  // namespace tfring
