#include "transport/shm_transport.h"

#include <errno.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

namespace tfring {
namespace {
constexpr size_t kRingBytes = ShmSegment::kRingBytes;
constexpr size_t kEagerMax = 64 << 10;      // messages up to this size are copied through the ring
constexpr size_t kEagerChunk = 512 << 10;   // payload bytes per eager record
constexpr size_t kMaxIovPerRecord = 256;
constexpr size_t kCmaChunk = 8 << 20;       // bytes per process_vm_readv call
constexpr size_t kMaxIov = 1024;            // IOV_MAX
constexpr size_t kBounceBytes = 1 << 20;
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

void checkSocket(const Socket& sock, int peer) {
  if (sock.peerClosed()) throw PeerError(peer, "rank " + std::to_string(peer) + " exited or closed its connection");
}
}  // namespace

ShmSendLink::ShmSendLink(int peer, std::shared_ptr<ShmSegment> mine, std::unique_ptr<ShmSegment> peerSeg, Socket sock)
    : SendLink(LinkKind::kShm, peer), mine_(std::move(mine)), peerSeg_(std::move(peerSeg)), sock_(std::move(sock)) {}

bool ShmSendLink::sendsSingleCopy() const {
  return peerSeg_->header()->cmaOk.load(std::memory_order_acquire) == 1;
}

void ShmSendLink::checkPeer() const { checkSocket(sock_, peer_); }

void ShmSendLink::abort() {
  sock_.shutdown();
  ringDoorbell(&mine_->header()->doorbell);
}

void ShmSendLink::start(const IoList& data) {
  out_.emplace(data);
  total_ = totalBytes(data);
  cma_ = total_ > kEagerMax && sendsSingleCopy();
  ackTarget_ = 0;
}

bool ShmSendLink::done() const {
  return sent() == total_ && (!cma_ || peerSeg_->header()->acked.load(std::memory_order_acquire) >= ackTarget_);
}

bool ShmSendLink::progress() {
  const size_t remaining = total_ - sent();
  if (remaining == 0) return false;
  ShmHeader* h = peerSeg_->header();
  const uint64_t head = h->head.load(std::memory_order_relaxed);
  const uint64_t tail = h->tail.load(std::memory_order_acquire);
  const size_t space = kRingBytes - static_cast<size_t>(head - tail);
  return cma_ ? sendCma(remaining, head, space) : sendEager(remaining, head, space);
}

// One record naming up to kMaxIovPerRecord pieces of our memory for the receiver to read.
bool ShmSendLink::sendCma(size_t remaining, uint64_t head, size_t space) {
  IoList piece = out_->peek(remaining, kMaxIovPerRecord);
  const size_t recBytes = sizeof(Record) + piece.size() * sizeof(RemotePiece);
  if (space < recBytes) return false;
  Record rec{kCma, static_cast<uint32_t>(piece.size()), totalBytes(piece)};
  peerSeg_->write(head, &rec, sizeof(rec));
  uint64_t at = head + sizeof(rec);
  for (const auto& p : piece) {
    RemotePiece rp{reinterpret_cast<uint64_t>(p.iov_base), p.iov_len};
    peerSeg_->write(at, &rp, sizeof(rp));
    at += sizeof(rp);
  }
  ShmHeader* h = peerSeg_->header();
  h->head.store(head + recBytes, std::memory_order_release);
  ringDoorbell(&h->doorbell);
  out_->advance(rec.bytes);
  sentPayload_ += rec.bytes;
  ackTarget_ = sentPayload_;
  return true;
}

// One record carrying the bytes themselves; waits for room for at least 4 KiB (or the rest), so
// a nearly full ring is not filled with tiny records.
bool ShmSendLink::sendEager(size_t remaining, uint64_t head, size_t space) {
  if (space <= sizeof(Record) || space < sizeof(Record) + std::min<size_t>(remaining, 4096)) return false;
  const size_t n = std::min({remaining, space - sizeof(Record), kEagerChunk});
  Record rec{kEager, 0, n};
  peerSeg_->write(head, &rec, sizeof(rec));
  uint64_t at = head + sizeof(rec);
  for (const auto& p : out_->peek(n, SIZE_MAX)) {
    peerSeg_->write(at, p.iov_base, p.iov_len);
    at += p.iov_len;
  }
  ShmHeader* h = peerSeg_->header();
  h->head.store(at, std::memory_order_release);
  ringDoorbell(&h->doorbell);
  out_->advance(n);
  sentPayload_ += n;
  return true;
}

ShmRecvLink::ShmRecvLink(int peer, std::shared_ptr<ShmSegment> mine, std::unique_ptr<ShmSegment> peerSeg,
                         int peerPid, Socket sock)
    : RecvLink(LinkKind::kShm, peer),
      mine_(std::move(mine)),
      peerSeg_(std::move(peerSeg)),
      peerPid_(peerPid),
      sock_(std::move(sock)),
      bounce_(kBounceBytes) {}

void ShmRecvLink::probeSingleCopy(const uint64_t* probe) {
  uint64_t value = 0;
  iovec local{&value, sizeof(value)};
  iovec remote{const_cast<uint64_t*>(probe), sizeof(value)};
  bool ok = probe != nullptr && process_vm_readv(peerPid_, &local, 1, &remote, 1, 0) == sizeof(value) &&
            value == ShmSegment::kProbeMagic;
  mine_->header()->cmaOk.store(ok ? 1 : 2, std::memory_order_release);
}

std::string ShmRecvLink::name() const {
  return mine_->header()->cmaOk.load(std::memory_order_acquire) == 1 ? "shm (single-copy)" : "shm";
}

void ShmRecvLink::checkPeer() const { checkSocket(sock_, peer_); }

void ShmRecvLink::abort() {
  sock_.shutdown();
  ringDoorbell(&mine_->header()->doorbell);
}

void ShmRecvLink::start(const RecvTarget& target) { in_.emplace(target, &bounce_); }

bool ShmRecvLink::progress() {
  bool progressed = false;
  while (!done()) {
    if (curLeft_ == 0) {
      if (!takeRecord()) break;
      progressed = true;
      if (curLeft_ == 0) continue;
    }
    if (curKind_ == kEager) {
      if (!receiveEager()) break;
    } else {
      receiveCma();
    }
    ringDoorbell(&peerSeg_->header()->doorbell);  // room in our ring, or bytes acknowledged
    progressed = true;
  }
  return progressed;
}

// Reads the next record's header (and a CMA record's piece list); false when none has arrived.
bool ShmRecvLink::takeRecord() {
  ShmHeader* h = mine_->header();
  uint64_t tail = h->tail.load(std::memory_order_relaxed);
  if (h->head.load(std::memory_order_acquire) == tail) return false;
  Record rec;
  mine_->read(tail, &rec, sizeof(rec));
  tail += sizeof(rec);
  curKind_ = rec.kind;
  curLeft_ = rec.bytes;
  if (rec.kind == kCma) {
    curRemote_.resize(rec.niov);
    for (uint32_t i = 0; i < rec.niov; ++i) {
      RemotePiece rp;
      mine_->read(tail, &rp, sizeof(rp));
      tail += sizeof(rp);
      curRemote_[i] = {reinterpret_cast<void*>(rp.addr), rp.len};
    }
    curRemoteOff_ = 0;
  } else if (rec.kind != kEager) {
    throw Error(Code::kInternal, "shared-memory ring from rank " + std::to_string(peer_) +
                                     " is corrupt (record kind " + std::to_string(rec.kind) + ")");
  }
  h->tail.store(tail, std::memory_order_release);
  return true;
}

bool ShmRecvLink::receiveEager() {
  ShmHeader* h = mine_->header();
  const uint64_t tail = h->tail.load(std::memory_order_relaxed);
  const uint64_t head = h->head.load(std::memory_order_acquire);
  size_t avail = std::min<uint64_t>(head - tail, curLeft_);
  avail = std::min(avail, in_->remaining());
  if (avail == 0) return false;
  const size_t at = tail % kRingBytes;
  const size_t first = std::min(avail, kRingBytes - at);
  in_->write(mine_->ring() + at, first);
  if (avail > first) in_->write(mine_->ring(), avail - first);
  curLeft_ -= avail;
  recvPayload_ += avail;
  h->tail.store(tail + avail, std::memory_order_release);
  h->acked.store(recvPayload_, std::memory_order_release);
  return true;
}

// Copies the next part of a CMA record straight out of the sender's memory.
void ShmRecvLink::receiveCma() {
  size_t want = std::min<size_t>({curLeft_, kCmaChunk, in_->remaining()});
  IoList remote = sliceIo(curRemote_, curRemoteOff_, want);
  if (remote.size() > kMaxIov) {
    remote.resize(kMaxIov);
    want = totalBytes(remote);
  }
  IoList local = in_->next(want, kMaxIov);
  const size_t localBytes = totalBytes(local);
  if (localBytes < want) remote = sliceIo(curRemote_, curRemoteOff_, localBytes);
  ssize_t n = process_vm_readv(peerPid_, local.data(), local.size(), remote.data(), remote.size(), 0);
  if (n <= 0) {
    if (errno == ESRCH) throw PeerError(peer_, "rank " + std::to_string(peer_) + " exited");
    throw Error(Code::kInternal, std::string("single-copy read from rank ") + std::to_string(peer_) +
                                     " failed: " + std::strerror(errno));
  }
  in_->commit(static_cast<size_t>(n));
  curRemoteOff_ += static_cast<size_t>(n);
  curLeft_ -= static_cast<size_t>(n);
  recvPayload_ += static_cast<size_t>(n);
  if (curLeft_ == 0) mine_->header()->acked.store(recvPayload_, std::memory_order_release);
}

}  // namespace tfring
