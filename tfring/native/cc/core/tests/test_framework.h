// A minimal test runner: TEST(name) { ... } registers a case; CHECK / CHECK_EQ fail it with the
// file and line. main() runs the cases whose name contains argv[1] (all when absent) and ends
// with "N passed, N failed".
//
// SWEEP(name) registers a sweep: the same collective over every dtype, op, size and transport.
// Its threads and links are those of the smaller cases beside it; what it adds is arithmetic. So
// `--no-sweeps` (ThreadSanitizer's run in `make test`, where sweeps take 80% of the time) leaves
// them to the plain and AddressSanitizer runs; `make test-core-tsan-sweeps` runs them under TSan.
#pragma once

#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tfring_test {

struct Case {
  std::string name;
  std::function<void()> fn;
  bool sweep;
};
inline std::vector<Case>& registry() {
  static std::vector<Case> cases;
  return cases;
}
struct Registrar {
  Registrar(const char* name, std::function<void()> fn, bool sweep = false) {
    registry().push_back({name, std::move(fn), sweep});
  }
};

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs fn(rank) on `size` threads and rethrows the first failure.
template <typename F>
void spawn(int size, F fn) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!errors[r].empty()) throw Failure("rank " + std::to_string(r) + ": " + errors[r]);
  }
}

}  // namespace tfring_test

#define TF_CAT2(a, b) a##b
#define TF_CAT(a, b) TF_CAT2(a, b)
#define TEST(name)                                                                   \
  static void TF_CAT(test_, name)();                                                 \
  static tfring_test::Registrar TF_CAT(reg_, name)(#name, TF_CAT(test_, name));      \
  static void TF_CAT(test_, name)()

#define SWEEP(name)                                                                  \
  static void TF_CAT(test_, name)();                                                 \
  static tfring_test::Registrar TF_CAT(reg_, name)(#name, TF_CAT(test_, name), true); \
  static void TF_CAT(test_, name)()

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::ostringstream _s;                                                                 \
      _s << __FILE__ << ":" << __LINE__ << ": CHECK(" #cond ") failed";                      \
      throw tfring_test::Failure(_s.str());                                                  \
    }                                                                                        \
  } while (0)

#define CHECK_EQ(a, b)                                                                       \
  do {                                                                                       \
    auto _a = (a);                                                                           \
    auto _b = (b);                                                                           \
    if (!(_a == _b)) {                                                                       \
      std::ostringstream _s;                                                                 \
      _s << __FILE__ << ":" << __LINE__ << ": " #a " == " #b " failed: " << _a << " vs " << _b; \
      throw tfring_test::Failure(_s.str());                                                  \
    }                                                                                        \
  } while (0)

#define CHECK_THROWS(stmt, needle)                                                           \
  do {                                                                                       \
    bool _threw = false;                                                                     \
    try {                                                                                    \
      stmt;                                                                                  \
    } catch (const std::exception& _e) {                                                     \
      _threw = true;                                                                         \
      if (std::string(_e.what()).find(needle) == std::string::npos) {                       \
        std::ostringstream _s;                                                               \
        _s << __FILE__ << ":" << __LINE__ << ": error '" << _e.what() << "' lacks '" << needle << "'"; \
        throw tfring_test::Failure(_s.str());                                                \
      }                                                                                      \
    }                                                                                        \
    if (!_threw) {                                                                           \
      std::ostringstream _s;                                                                 \
      _s << __FILE__ << ":" << __LINE__ << ": " #stmt " did not throw";                      \
      throw tfring_test::Failure(_s.str());                                                  \
    }                                                                                        \
  } while (0)
