#include "algorithms/allgather_ring.h"

#include <cstring>
#include <numeric>

namespace tfring {

void ringAllgather(Transport* t, int size, const IoList& out, const std::vector<size_t>& blockBytes,
                   Deadline deadline) {
  if (size == 1) return;
  std::vector<size_t> start(size + 1, 0);
  for (int r = 0; r < size; ++r) start[r + 1] = start[r] + blockBytes[r];
  const int rank = t->rank();
  for (int step = 0; step < size - 1; ++step) {
    const int sendBlock = ringIndex(rank - step, size);
    const int recvBlock = ringIndex(rank - step - 1, size);
    RecvTarget target;
    target.into = sliceIo(out, start[recvBlock], blockBytes[recvBlock]);
    target.bytes = blockBytes[recvBlock];
    t->sendRecv(sliceIo(out, start[sendBlock], blockBytes[sendBlock]), target, deadline);
  }
}

std::vector<std::string> allgatherStrings(Transport* t, int size, const std::string& mine,
                                          Deadline deadline) {
  if (size == 1) return {mine};
  // First the lengths (fixed size), then the strings.
  std::vector<uint64_t> lens(size, 0);
  lens[t->rank()] = mine.size();
  ringAllgather(t, size, {{lens.data(), lens.size() * sizeof(uint64_t)}},
                std::vector<size_t>(size, sizeof(uint64_t)), deadline);
  std::vector<size_t> blocks(lens.begin(), lens.end());
  size_t total = std::accumulate(blocks.begin(), blocks.end(), size_t{0});
  std::string all(total, '\0');
  size_t at = std::accumulate(blocks.begin(), blocks.begin() + t->rank(), size_t{0});
  if (!mine.empty()) std::memcpy(&all[at], mine.data(), mine.size());
  ringAllgather(t, size, {{&all[0], total}}, blocks, deadline);
  std::vector<std::string> out;
  at = 0;
  for (int r = 0; r < size; ++r) {
    out.push_back(all.substr(at, blocks[r]));
    at += blocks[r];
  }
  return out;
}

}  // namespace tfring
