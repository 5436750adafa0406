#include "algorithms/allgather_framed.h"

#include <cstring>
#include <string>

namespace tfring {
namespace {

// What travels in front of a block: its payload length, then the tag.
struct Frame {
  std::vector<uint8_t> header;  // uint64 payload length + tag
  IoList payload;
};

std::vector<uint8_t> header(uint64_t payloadBytes, const std::vector<uint8_t>& tag) {
  std::vector<uint8_t> h(sizeof(uint64_t) + tag.size());
  std::memcpy(h.data(), &payloadBytes, sizeof(uint64_t));
  if (!tag.empty()) std::memcpy(h.data() + sizeof(uint64_t), tag.data(), tag.size());
  return h;
}

// Where block `b` arriving from `from` goes: its header, then a payload of the length it names.
RecvTarget receiveInto(Frame* frame, FramedBlock* block, size_t maxPayload, int from) {
  RecvTarget target;
  target.into = {{frame->header.data(), frame->header.size()}};
  target.bytes = frame->header.size();
  target.more = [frame, block, maxPayload, from](const uint8_t* h) {
    uint64_t n;
    std::memcpy(&n, h, sizeof(n));
    if (n > maxPayload) {
      throw PeerError(from, "the data from rank " + std::to_string(from) + " is corrupt (a block of " +
                                std::to_string(n) + " bytes where at most " + std::to_string(maxPayload) +
                                " are allowed)");
    }
    block->payload.resize(n);
    frame->payload = {{block->payload.data(), n}};
    return n ? frame->payload : IoList{};
  };
  return target;
}

}  // namespace

std::vector<FramedBlock> ringAllgatherFramed(Transport* t, int size, const std::vector<uint8_t>& tag,
                                             const IoList& payload, size_t maxPayload, Deadline deadline) {
  std::vector<FramedBlock> blocks(size);
  const int rank = t ? t->rank() : 0;
  blocks[rank].tag = tag;
  if (size == 1) return blocks;
  std::vector<Frame> frames(size);
  for (auto& f : frames) f.header.resize(sizeof(uint64_t) + tag.size());
  frames[rank] = {header(totalBytes(payload), tag), payload};
  for (int step = 0; step < size - 1; ++step) {
    const int sendBlock = ringIndex(rank - step, size);
    const int recvBlock = ringIndex(rank - step - 1, size);
    IoList send = {{frames[sendBlock].header.data(), frames[sendBlock].header.size()}};
    send.insert(send.end(), frames[sendBlock].payload.begin(), frames[sendBlock].payload.end());
    t->sendRecv(send, receiveInto(&frames[recvBlock], &blocks[recvBlock], maxPayload, t->left()), deadline);
  }
  for (int k = 0; k < size; ++k) {
    if (k != rank) blocks[k].tag.assign(frames[k].header.begin() + sizeof(uint64_t), frames[k].header.end());
  }
  return blocks;
}

}  // namespace tfring
