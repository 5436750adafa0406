#include <chrono>

#include "tests/test_framework.h"

// core_tests [--no-sweeps] [FILTER]: the cases whose name contains FILTER; --no-sweeps leaves out
// the SWEEP cases (test_framework.h).
int main(int argc, char** argv) {
  bool sweeps = true;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--no-sweeps") {
      sweeps = false;
    } else {
      filter = arg;
    }
  }
  int passed = 0, failed = 0, left_out = 0;
  for (const auto& c : tfring_test::registry()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    if (c.sweep && !sweeps) {
      ++left_out;
      continue;
    }
    auto start = std::chrono::steady_clock::now();
    try {
      c.fn();
      ++passed;
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::cout << "PASS " << c.name << " (" << s << " s)" << std::endl;
    } catch (const std::exception& e) {
      ++failed;
      std::cout << "FAIL " << c.name << ": " << e.what() << std::endl;
    }
  }
  std::cout << passed << " passed, " << failed << " failed";
  if (left_out) std::cout << " (" << left_out << " sweeps left out: --no-sweeps)";
  std::cout << std::endl;
  return failed == 0 && passed > 0 ? 0 : 1;
}
