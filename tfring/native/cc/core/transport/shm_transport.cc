#include "transport/shm_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace tfring {

namespace {
constexpr size_t kRingBytes = 4 << 20;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kEagerMax = 64 << 10;      // messages up to this size are copied through the ring
constexpr size_t kEagerChunk = 512 << 10;   // payload bytes per eager record
constexpr size_t kMaxIovPerRecord = 256;
constexpr size_t kCmaChunk = 8 << 20;       // bytes per process_vm_readv call
constexpr size_t kBounceBytes = 1 << 20;
constexpr uint64_t kProbeMagic = 0x7466726970726f62ull;  // "tfriprob"
constexpr uint32_t kEager = 1, kCma = 2;

struct Record {
  uint32_t kind;
  uint32_t niov;
  uint64_t bytes;
};
struct RemotePiece {
  uint64_t addr;
  uint64_t len;
};

void ringWrite(uint8_t* ring, uint64_t pos, const void* src, size_t n) {
  size_t at = pos % kRingBytes;
  size_t first = std::min(n, kRingBytes - at);
  std::memcpy(ring + at, src, first);
  std::memcpy(ring, static_cast<const uint8_t*>(src) + first, n - first);
}

void ringRead(const uint8_t* ring, uint64_t pos, void* dst, size_t n) {
  size_t at = pos % kRingBytes;
  size_t first = std::min(n, kRingBytes - at);
  std::memcpy(dst, ring + at, first);
  std::memcpy(static_cast<uint8_t*>(dst) + first, ring, n - first);
}

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}
}  // namespace

struct ShmHeader {
  alignas(64) std::atomic<uint32_t> doorbell;
  alignas(64) std::atomic<uint64_t> head;   // bytes the left neighbour wrote into our ring
  alignas(64) std::atomic<uint64_t> tail;   // bytes we consumed from it
  alignas(64) std::atomic<uint64_t> acked;  // payload bytes we received in total (releases sends)
  alignas(64) std::atomic<uint32_t> cmaOk;  // 1: we can read the left neighbour's memory; 2: no
  uint64_t probe;
};
static_assert(sizeof(ShmHeader) <= kHeaderBytes, "header must fit its page");

ShmSegment::ShmSegment(std::string name, void* base, bool owner)
    : name_(std::move(name)), base_(base), header_(static_cast<ShmHeader*>(base)), owner_(owner) {}

std::unique_ptr<ShmSegment> ShmSegment::create(const std::string& name) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    throw Error(Code::kUnavailable, "cannot create shared memory '" + name + "': " + std::strerror(errno));
  }
  if (ftruncate(fd, kHeaderBytes + kRingBytes) != 0) {
    ::close(fd);
    shm_unlink(name.c_str());
    throw Error(Code::kUnavailable, "cannot size shared memory '" + name + "' (is /dev/shm full?)");
  }
  void* base = mmap(nullptr, kHeaderBytes + kRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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
  void* base = mmap(nullptr, kHeaderBytes + kRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw Error(Code::kUnavailable, "cannot map shared memory '" + name + "'");
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, base, false));
}

ShmSegment::~ShmSegment() {
  if (owner_) unlink();
  munmap(base_, kHeaderBytes + kRingBytes);
}

void ShmSegment::unlink() {
  if (owner_ && !unlinked_) {
    shm_unlink(name_.c_str());
    unlinked_ = true;
  }
}

uint8_t* ShmSegment::ring() const { return static_cast<uint8_t*>(base_) + kHeaderBytes; }
const uint64_t* ShmSegment::probeAddress() const { return &header_->probe; }

ShmTransport::ShmTransport(int rank, int left, int right, std::unique_ptr<ShmSegment> mine,
                           std::unique_ptr<ShmSegment> leftSeg, std::unique_ptr<ShmSegment> rightSeg,
                           int leftPid, Socket toRight, Socket fromLeft)
    : Transport(rank, left, right),
      mine_(std::move(mine)),
      leftSeg_(std::move(leftSeg)),
      rightSeg_(std::move(rightSeg)),
      leftPid_(leftPid),
      toRight_(std::move(toRight)),
      fromLeft_(std::move(fromLeft)),
      bounce_(kBounceBytes) {}

void ShmTransport::probeSingleCopy(const uint64_t* probe) {
  uint64_t value = 0;
  iovec local{&value, sizeof(value)};
  iovec remote{const_cast<uint64_t*>(probe), sizeof(value)};
  bool ok = probe != nullptr &&
            process_vm_readv(leftPid_, &local, 1, &remote, 1, 0) == sizeof(value) &&
            value == kProbeMagic;
  mine_->header()->cmaOk.store(ok ? 1 : 2, std::memory_order_release);
}

bool ShmTransport::sendsSingleCopy() const {
  return rightSeg_->header()->cmaOk.load(std::memory_order_acquire) == 1;
}

std::string ShmTransport::name() const { return sendsSingleCopy() ? "shm (single-copy)" : "shm"; }

void ShmTransport::ringBell(ShmHeader* h) {
  h->doorbell.fetch_add(1, std::memory_order_release);
  futex(&h->doorbell, FUTEX_WAKE, INT32_MAX, nullptr);
}

void ShmTransport::abort() {
  aborted_ = true;
  toRight_.shutdown();
  fromLeft_.shutdown();
  ringBell(mine_->header());
}

bool ShmTransport::progressSend(IovCursor& out, size_t sendBytes, bool cma, uint64_t* ackTarget) {
  size_t remaining = sendBytes - out.consumed();
  if (remaining == 0) return false;
  ShmHeader* h = rightSeg_->header();
  uint8_t* ring = rightSeg_->ring();
  uint64_t head = h->head.load(std::memory_order_relaxed);
  uint64_t tail = h->tail.load(std::memory_order_acquire);
  size_t space = kRingBytes - static_cast<size_t>(head - tail);
  if (cma) {
    IoList piece = out.peek(remaining, kMaxIovPerRecord);
    size_t recBytes = sizeof(Record) + piece.size() * sizeof(RemotePiece);
    if (space < recBytes) return false;
    Record rec{kCma, static_cast<uint32_t>(piece.size()), totalBytes(piece)};
    ringWrite(ring, head, &rec, sizeof(rec));
    uint64_t at = head + sizeof(rec);
    for (const auto& p : piece) {
      RemotePiece rp{reinterpret_cast<uint64_t>(p.iov_base), p.iov_len};
      ringWrite(ring, at, &rp, sizeof(rp));
      at += sizeof(rp);
    }
    h->head.store(head + recBytes, std::memory_order_release);
    ringBell(h);
    out.advance(rec.bytes);
    sentPayload_ += rec.bytes;
    *ackTarget = sentPayload_;
    return true;
  }
  if (space <= sizeof(Record) || space < sizeof(Record) + std::min<size_t>(remaining, 4096)) return false;
  size_t n = std::min({remaining, space - sizeof(Record), kEagerChunk});
  Record rec{kEager, 0, n};
  ringWrite(ring, head, &rec, sizeof(rec));
  uint64_t at = head + sizeof(rec);
  for (const auto& p : out.peek(n, SIZE_MAX)) {
    ringWrite(ring, at, p.iov_base, p.iov_len);
    at += p.iov_len;
  }
  h->head.store(at, std::memory_order_release);
  ringBell(h);
  out.advance(n);
  sentPayload_ += n;
  return true;
}

bool ShmTransport::progressRecv(RecvCursor& in) {
  ShmHeader* h = mine_->header();
  const uint8_t* ring = mine_->ring();
  bool progressed = false;
  while (!in.done()) {
    uint64_t tail = h->tail.load(std::memory_order_relaxed);
    if (curLeft_ == 0) {
      uint64_t head = h->head.load(std::memory_order_acquire);
      if (head == tail) break;
      Record rec;
      ringRead(ring, tail, &rec, sizeof(rec));
      tail += sizeof(rec);
      curKind_ = rec.kind;
      curLeft_ = rec.bytes;
      if (rec.kind == kCma) {
        curRemote_.resize(rec.niov);
        for (uint32_t i = 0; i < rec.niov; ++i) {
          RemotePiece rp;
          ringRead(ring, tail, &rp, sizeof(rp));
          tail += sizeof(rp);
          curRemote_[i] = {reinterpret_cast<void*>(rp.addr), rp.len};
        }
        curRemoteOff_ = 0;
      } else if (rec.kind != kEager) {
        throw Error(Code::kInternal, "shared-memory ring from rank " + std::to_string(left_) +
                                         " is corrupt (record kind " + std::to_string(rec.kind) + ")");
      }
      h->tail.store(tail, std::memory_order_release);
      progressed = true;
      if (curLeft_ == 0) continue;
    }
    if (curKind_ == kEager) {
      uint64_t head = h->head.load(std::memory_order_acquire);
      size_t avail = std::min<uint64_t>(head - tail, curLeft_);
      avail = std::min(avail, in.remaining());
      if (avail == 0) break;
      size_t at = tail % kRingBytes;
      size_t first = std::min(avail, kRingBytes - at);
      in.write(ring + at, first);
      if (avail > first) in.write(ring, avail - first);
      curLeft_ -= avail;
      recvPayload_ += avail;
      h->tail.store(tail + avail, std::memory_order_release);
      h->acked.store(recvPayload_, std::memory_order_release);
    } else {
      size_t want = std::min<size_t>({curLeft_, kCmaChunk, in.remaining()});
      IoList remote = sliceIo(curRemote_, curRemoteOff_, want);
      if (remote.size() > 1024) {
        remote.resize(1024);
        want = totalBytes(remote);
      }
      IoList local = in.next(want, 1024);
      size_t localBytes = totalBytes(local);
      if (localBytes < want) remote = sliceIo(curRemote_, curRemoteOff_, localBytes);
      ssize_t n = process_vm_readv(leftPid_, local.data(), local.size(), remote.data(), remote.size(), 0);
      if (n <= 0) {
        if (errno == ESRCH) throw PeerError(left_, "rank " + std::to_string(left_) + " exited");
        throw Error(Code::kInternal, std::string("single-copy read from rank ") + std::to_string(left_) +
                                         " failed: " + std::strerror(errno));
      }
      in.commit(static_cast<size_t>(n));
      curRemoteOff_ += static_cast<size_t>(n);
      curLeft_ -= static_cast<size_t>(n);
      recvPayload_ += static_cast<size_t>(n);
      if (curLeft_ == 0) h->acked.store(recvPayload_, std::memory_order_release);
    }
    ringBell(leftSeg_->header());
    progressed = true;
  }
  return progressed;
}

void ShmTransport::wait(uint32_t seen, Deadline deadline, int waitingOn) {
  std::atomic<uint32_t>& bell = mine_->header()->doorbell;
  // A short spin catches the neighbour's answer without a sleep when both ranks have a core.
  for (int i = 0; i < 64; ++i) {
    if (bell.load(std::memory_order_acquire) != seen) return;
    if (i >= 32) sched_yield();
  }
  timespec ts{0, 50 * 1000 * 1000};
  futex(&bell, FUTEX_WAIT, seen, &ts);
  if (bell.load(std::memory_order_acquire) != seen) return;
  if (aborted_) throw PeerError(-1, "transport was aborted after an earlier failure");
  if (fromLeft_.peerClosed()) {
    throw PeerError(left_, "rank " + std::to_string(left_) + " exited or closed its connection");
  }
  if (right_ != left_ && toRight_.peerClosed()) {
    throw PeerError(right_, "rank " + std::to_string(right_) + " exited or closed its connection");
  }
  if (deadline.expired()) {
    throw PeerError(waitingOn, "timed out waiting for rank " + std::to_string(waitingOn) +
                                   " (it stalled, or the ranks are out of step: different numbers of steps or collectives, e.g. datasets of different sizes)");
  }
}

void ShmTransport::sendRecv(const IoList& send, const RecvTarget& recv, Deadline deadline) {
  if (aborted_) throw PeerError(-1, "transport was aborted after an earlier failure");
  const size_t sendBytes = totalBytes(send);
  const bool cma = sendBytes > kEagerMax && sendsSingleCopy();
  IovCursor out(send);
  RecvCursor in(recv, &bounce_);
  uint64_t ackTarget = 0;
  ShmHeader* right = rightSeg_->header();
  for (;;) {
    uint32_t seen = mine_->header()->doorbell.load(std::memory_order_acquire);
    bool sent = out.consumed() == sendBytes &&
                (!cma || right->acked.load(std::memory_order_acquire) >= ackTarget);
    if (sent && in.done()) return;
    bool progressed = progressSend(out, sendBytes, cma, &ackTarget);
    progressed |= progressRecv(in);
    if (!progressed) wait(seen, deadline, in.done() ? right_ : left_);
  }
}

}  // namespace tfring
