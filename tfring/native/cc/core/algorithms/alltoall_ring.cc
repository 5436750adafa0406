#include "algorithms/alltoall_ring.h"

#include <cstring>
#include <cstdint>

namespace tfring {
namespace {

// Where block [o][d] of `bytes` starts in a buffer of the blocks of row o (by destination) or of
// column d (by origin).
size_t rowOffset(const std::vector<std::vector<size_t>>& bytes, int o, int d) {
  size_t at = 0;
  for (int k = 0; k < d; ++k) at += bytes[o][k];
  return at;
}
size_t columnOffset(const std::vector<std::vector<size_t>>& bytes, int o, int d) {
  size_t at = 0;
  for (int k = 0; k < o; ++k) at += bytes[k][d];
  return at;
}

void copyIo(const IoList& from, const IoList& to) {
  size_t at = 0;
  for (const iovec& a : from) {
    const auto* p = static_cast<const uint8_t*>(a.iov_base);
    for (const iovec& b : sliceIo(to, at, a.iov_len)) {
      std::memcpy(b.iov_base, p, b.iov_len);
      p += b.iov_len;
    }
    at += a.iov_len;
  }
}

}  // namespace

void ringAlltoall(Transport* t, int size, const IoList& in, const IoList& out,
                  const std::vector<std::vector<size_t>>& bytes, Deadline deadline) {
  const int me = t ? t->rank() : 0;
  copyIo(sliceIo(in, rowOffset(bytes, me, me), bytes[me][me]), sliceIo(out, columnOffset(bytes, me, me), bytes[me][me]));
  // `held`: the blocks received last step that go further, for destinations me+1, me+2, ...
  std::vector<uint8_t> held, arriving;
  for (int step = 1; step < size; ++step) {
    const int from = ringIndex(me - step, size);  // whose blocks arrive
    // What we pass on: our own blocks at first, then what arrived last step; for the ranks
    // me+1 ... me+size-step, in that order.
    IoList send;
    if (step == 1) {
      for (int k = 1; k < size; ++k) {
        const int d = ringIndex(me + k, size);
        for (const iovec& v : sliceIo(in, rowOffset(bytes, me, d), bytes[me][d])) send.push_back(v);
      }
    } else if (!held.empty()) {
      send.push_back({held.data(), held.size()});
    }
    // What arrives: `from`'s blocks for me, me+1, ..., me+(size-1-step).
    size_t mine = bytes[from][me], further = 0;
    for (int k = 1; k <= size - 1 - step; ++k) further += bytes[from][ringIndex(me + k, size)];
    arriving.assign(further, 0);
    RecvTarget target;
    target.bytes = mine + further;
    target.into = sliceIo(out, columnOffset(bytes, from, me), mine);
    if (further) target.into.push_back({arriving.data(), further});
    t->sendRecv(send, target, deadline);
    held.swap(arriving);
  }
}

}  // namespace tfring
