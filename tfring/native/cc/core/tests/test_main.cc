#include <chrono>

#include "tests/test_framework.h"

int main(int argc, char** argv) {
  std::string filter = argc > 1 ? argv[1] : "";
  int passed = 0, failed = 0;
  for (const auto& c : tfring_test::registry()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
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
  std::cout << passed << " passed, " << failed << " failed" << std::endl;
  return failed == 0 && passed > 0 ? 0 : 1;
}
