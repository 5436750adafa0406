// Ring allgather of framed blocks: each rank's block is a fixed-size tag (the same size on every
// rank) and a payload whose length only the sender knows. The length travels in front of the
// block, so a receiver takes exactly what was sent whatever it expected, and the ring stays in
// step even when the ranks disagree about what they are doing. That is what lets the engine send
// a collective's description and, for small collectives, its data in one exchange
// (request_digest.h): P-1 steps instead of P-1 for the check plus more for the data.
#pragma once

#include <cstdint>
#include <vector>

#include "common.h"
#include "transport/transport.h"

namespace tfring {

struct FramedBlock {
  std::vector<uint8_t> tag;
  std::vector<uint8_t> payload;  // empty for our own block: the caller has it
};

// Every rank's block in rank order. `payload` is this rank's (it is sent, not copied); a block
// arriving with a payload over `maxPayload` bytes throws PeerError naming the sender (a corrupt
// stream: the ring cannot go on).
std::vector<FramedBlock> ringAllgatherFramed(Transport* transport, int size, const std::vector<uint8_t>& tag,
                                             const IoList& payload, size_t maxPayload, Deadline deadline);

}  // namespace tfring
