#include "algorithms/broadcast_ring.h"

#include <algorithm>

namespace tfring {
namespace {
constexpr size_t kChunkBytes = 4 << 20;
}

void ringBroadcast(Transport* t, int size, int root, const IoList& data, Deadline deadline) {
  if (size == 1) return;
  const size_t bytes = totalBytes(data);
  const size_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  const bool isRoot = t->rank() == root;
  const bool forwards = (t->rank() + 1) % size != root;  // the last position before the root only receives
  auto chunk = [&](size_t c) {
    size_t start = c * kChunkBytes;
    return sliceIo(data, start, std::min(kChunkBytes, bytes - start));
  };
  if (chunks == 0) return;
  // Step s: receive chunk s (non-roots), send chunk s (root) or chunk s-1 (forwarders).
  for (size_t s = 0; s <= chunks; ++s) {
    IoList send;
    RecvTarget recv;
    if (isRoot) {
      if (s < chunks) send = chunk(s);
    } else {
      if (s < chunks) {
        recv.into = chunk(s);
        recv.bytes = totalBytes(recv.into);
      }
      if (forwards && s >= 1) send = chunk(s - 1);
    }
    if (send.empty() && recv.bytes == 0) continue;
    t->sendRecv(send, recv, deadline);
  }
}

}  // namespace tfring
