#include "rendezvous/store_frame.h"

#include <cstring>
#include <random>

namespace tfring {

std::string randomBytes(size_t n) {
  std::random_device rd;  // /dev/urandom (getrandom) on Linux
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rd());
  return out;
}

Digest frameMac(const std::string& secret, const std::string& nonce, uint64_t seq, const std::string& payload) {
  std::string msg = nonce;
  msg.append(reinterpret_cast<const char*>(&seq), sizeof(seq));
  msg += payload;
  return hmacSha256(secret, msg.data(), msg.size());
}

std::string encodeFrame(const std::string& secret, const std::string& nonce, uint64_t seq,
                        const std::string& payload) {
  std::string frame;
  frame.reserve(kFrameHeaderBytes + payload.size() + kMacBytes);
  putU32(&frame, static_cast<uint32_t>(payload.size()));
  frame += payload;
  Digest mac = frameMac(secret, nonce, seq, payload);
  frame.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  return frame;
}

void putU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }

uint32_t getU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  if (at + 4 <= s.size()) std::memcpy(&v, s.data() + at, 4);
  return v;
}

std::string encodeRequest(char op, const std::string& key, const std::string& rest) {
  std::string r(1, op);
  putU32(&r, static_cast<uint32_t>(key.size()));
  r += key;
  r += rest;
  return r;
}

}  // namespace tfring
