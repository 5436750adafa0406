// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), used to authenticate rendezvous messages
// with the job secret. Small and dependency-free so the core links against nothing but libc;
// checked against the RFC 4231 test vectors in tests/hmac_test.cc.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tfring {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const void* data, size_t n);
Digest hmacSha256(const std::string& key, const void* data, size_t n);
// Compares in time independent of where the first difference is.
bool digestEqual(const Digest& a, const Digest& b);
std::string toHex(const Digest& d);

}  // namespace tfring
