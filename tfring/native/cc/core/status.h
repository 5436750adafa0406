// The outcome of a collective as a value: what the engine hands to a request's `done` callback,
// which runs on another thread than the one that failed (so an exception cannot carry it).
#pragma once

#include <string>
#include <utility>

#include "common.h"

namespace tfring {

struct Status {
  Code code = Code::kOk;
  std::string message;

  bool ok() const { return code == Code::kOk; }
  static Status error(Code c, std::string m) { return {c, std::move(m)}; }
};

}  // namespace tfring
