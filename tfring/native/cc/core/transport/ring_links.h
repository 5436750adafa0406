// The two data connections of a rank in the ring, each authenticated with the job secret.
//
// Handshake (per connection, so a recorded one cannot be replayed): the accepting rank sends a
// fresh random nonce; the connecting rank answers with its rank and
// HMAC(secret, "tfring-data" | job | from -> to | nonce). One poll loop drives the connection to
// the right neighbour and every incoming connection at once, so a peer that connects and stays
// silent (or a stranger) delays nobody: it is dropped after `handshakeTimeout` seconds, and every
// refusal is logged with the peer's address.
#pragma once

#include <string>

#include "common.h"
#include "config.h"
#include "transport/socket.h"

namespace tfring {

struct RingLinks {
  Socket toRight;
  Socket fromLeft;
};

// Connects to the right neighbour at rightHost:rightPort and accepts the left one on `listener`.
// Throws kDeadlineExceeded (naming the neighbour) when either does not complete by `deadline`.
RingLinks linkNeighbours(const Config& c, const Socket& listener, const std::string& rightHost, int rightPort,
                         Deadline deadline, double handshakeTimeout = 5.0);

}  // namespace tfring
