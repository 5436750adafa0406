// The rendezvous store's wire format, shared by TcpStore (client) and TcpStoreServer.
//
// Both directions: u32 length | payload | HMAC-SHA256(secret, nonce | seq | payload). The server
// opens each connection by sending a random nonce; `seq` counts the messages on that connection in
// both directions, so a recorded message cannot be replayed on another connection or out of turn.
// A request payload is: op (1 byte: S set, G get, A add) | u32 key length | key | rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "rendezvous/hmac.h"

namespace tfring {

constexpr size_t kNonceBytes = 16;
constexpr size_t kFrameHeaderBytes = 4;
constexpr size_t kMacBytes = 32;

// `n` bytes from the OS's random source.
std::string randomBytes(size_t n);

Digest frameMac(const std::string& secret, const std::string& nonce, uint64_t seq, const std::string& payload);
// The whole frame (length, payload, MAC) ready to send.
std::string encodeFrame(const std::string& secret, const std::string& nonce, uint64_t seq,
                        const std::string& payload);

void putU32(std::string* s, uint32_t v);
// The u32 at `at`, or 0 when `s` is too short.
uint32_t getU32(const std::string& s, size_t at);
std::string encodeRequest(char op, const std::string& key, const std::string& rest);

}  // namespace tfring
