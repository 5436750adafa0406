#include "transport/doorbell.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace tfring {
namespace {

long futex(Doorbell* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

}  // namespace

void ringDoorbell(Doorbell* bell) {
  bell->fetch_add(1, std::memory_order_release);
  futex(bell, FUTEX_WAKE, INT32_MAX, nullptr);
}

bool sleepOnDoorbell(Doorbell* bell, uint32_t seen, int timeoutMs) {
  for (int i = 0; i < 64; ++i) {
    if (bell->load(std::memory_order_acquire) != seen) return true;
    if (i >= 32) sched_yield();
  }
  if (timeoutMs > 0) {
    timespec ts{timeoutMs / 1000, static_cast<long>(timeoutMs % 1000) * 1000 * 1000};
    futex(bell, FUTEX_WAIT, seen, &ts);
  }
  return bell->load(std::memory_order_acquire) != seen;
}

}  // namespace tfring
