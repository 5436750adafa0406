// One rank's shared-memory segment: a header page, then its inbox, a byte ring that only its left
// neighbour writes. Each rank with a shared-memory link creates its own segment and maps those of
// its shared-memory neighbours (shm_transport.h says what travels through them).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/doorbell.h"

namespace tfring {

struct ShmHeader {
  alignas(64) Doorbell doorbell;            // rung by whoever changes something this rank waits on
  alignas(64) std::atomic<uint64_t> head;   // bytes the left neighbour wrote into our ring
  alignas(64) std::atomic<uint64_t> tail;   // bytes we consumed from it
  alignas(64) std::atomic<uint64_t> acked;  // payload bytes we received in total (releases sends)
  alignas(64) std::atomic<uint32_t> cmaOk;  // 1: we can read the left neighbour's memory; 2: no
  uint64_t probe;                           // kProbeMagic: what the right neighbour test-reads
};

class ShmSegment {
 public:
  static constexpr size_t kRingBytes = 4 << 20;
  static constexpr uint64_t kProbeMagic = 0x7466726970726f62ull;  // "tfriprob"

  static std::unique_ptr<ShmSegment> create(const std::string& name);
  static std::unique_ptr<ShmSegment> open(const std::string& name);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name; mappings stay valid. Called once every peer has mapped it, so a killed job
  // leaves nothing behind in /dev/shm.
  void unlink();
  ShmHeader* header() const { return header_; }
  uint8_t* ring() const;
  // Copies to / from the ring at stream position `pos`, wrapping around its end.
  void write(uint64_t pos, const void* src, size_t n) const;
  void read(uint64_t pos, void* dst, size_t n) const;
  // Address of the probe word, for the right neighbour's single-copy test.
  const uint64_t* probeAddress() const { return &header_->probe; }

 private:
  ShmSegment(std::string name, void* base, bool owner);
  std::string name_;
  void* base_;
  ShmHeader* header_;
  bool owner_;
  bool unlinked_ = false;
};

}  // namespace tfring
