#include "transport/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "common.h"

namespace tfring {
namespace {
constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(ShmHeader) <= kHeaderBytes, "header must fit its page");
constexpr size_t kSegmentBytes = kHeaderBytes + ShmSegment::kRingBytes;
}  // namespace

ShmSegment::ShmSegment(std::string name, void* base, bool owner)
    : name_(std::move(name)), base_(base), header_(static_cast<ShmHeader*>(base)), owner_(owner) {}

std::unique_ptr<ShmSegment> ShmSegment::create(const std::string& name) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    throw Error(Code::kUnavailable, "cannot create shared memory '" + name + "': " + std::strerror(errno));
  }
  if (ftruncate(fd, kSegmentBytes) != 0) {
    ::close(fd);
    shm_unlink(name.c_str());
    throw Error(Code::kUnavailable, "cannot size shared memory '" + name + "' (is /dev/shm full?)");
  }
  void* base = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    throw Error(Code::kUnavailable, "cannot map shared memory '" + name + "'");
  }
  auto* h = new (base) ShmHeader();
  h->probe = kProbeMagic;
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, base, true));
}

std::unique_ptr<ShmSegment> ShmSegment::open(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    throw Error(Code::kUnavailable, "cannot open shared memory '" + name + "': " + std::strerror(errno));
  }
  void* base = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw Error(Code::kUnavailable, "cannot map shared memory '" + name + "'");
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, base, false));
}

ShmSegment::~ShmSegment() {
  if (owner_) unlink();
  munmap(base_, kSegmentBytes);
}

void ShmSegment::unlink() {
  if (owner_ && !unlinked_) {
    shm_unlink(name_.c_str());
    unlinked_ = true;
  }
}

uint8_t* ShmSegment::ring() const { return static_cast<uint8_t*>(base_) + kHeaderBytes; }

void ShmSegment::write(uint64_t pos, const void* src, size_t n) const {
  size_t at = pos % kRingBytes;
  size_t first = std::min(n, kRingBytes - at);
  std::memcpy(ring() + at, src, first);
  std::memcpy(ring(), static_cast<const uint8_t*>(src) + first, n - first);
}

void ShmSegment::read(uint64_t pos, void* dst, size_t n) const {
  size_t at = pos % kRingBytes;
  size_t first = std::min(n, kRingBytes - at);
  std::memcpy(dst, ring() + at, first);
  std::memcpy(static_cast<uint8_t*>(dst) + first, ring(), n - first);
}

}  // namespace tfring
