#include "transport/transport.h"

#include <algorithm>
#include <cstring>

namespace tfring {

size_t totalBytes(const IoList& v) {
  size_t n = 0;
  for (const auto& p : v) n += p.iov_len;
  return n;
}

IoList sliceIo(const IoList& v, size_t offset, size_t length) {
  IoList out;
  for (const auto& p : v) {
    if (length == 0) break;
    if (offset >= p.iov_len) {
      offset -= p.iov_len;
      continue;
    }
    size_t take = std::min(p.iov_len - offset, length);
    out.push_back({static_cast<char*>(p.iov_base) + offset, take});
    length -= take;
    offset = 0;
  }
  return out;
}

IoList IovCursor::peek(size_t maxBytes, size_t maxIov) const {
  IoList out;
  size_t idx = idx_, off = off_;
  while (maxBytes > 0 && out.size() < maxIov && idx < v_->size()) {
    const iovec& p = (*v_)[idx];
    size_t take = std::min(p.iov_len - off, maxBytes);
    if (take > 0) out.push_back({static_cast<char*>(p.iov_base) + off, take});
    maxBytes -= take;
    ++idx;
    off = 0;
  }
  return out;
}

void IovCursor::advance(size_t n) {
  consumed_ += n;
  while (n > 0 && idx_ < v_->size()) {
    size_t left = (*v_)[idx_].iov_len - off_;
    if (n < left) {
      off_ += n;
      return;
    }
    n -= left;
    ++idx_;
    off_ = 0;
  }
  // Skip empty pieces so peek() never returns a zero-length head.
  while (idx_ < v_->size() && (*v_)[idx_].iov_len == off_) {
    ++idx_;
    off_ = 0;
  }
}

RecvCursor::RecvCursor(const RecvTarget& target, std::vector<uint8_t>* bounce)
    : target_(target), bounce_(bounce), pieces_(target.into), into_(pieces_), total_(target.bytes) {
  askForMore();
}

void RecvCursor::askForMore() {
  if (!target_.more || asked_ || committed_ < total_) return;
  asked_ = true;
  IoList rest = target_.more(static_cast<const uint8_t*>(pieces_.empty() ? nullptr : pieces_[0].iov_base));
  pieces_.insert(pieces_.end(), rest.begin(), rest.end());
  total_ += totalBytes(rest);
}

IoList RecvCursor::next(size_t maxBytes, size_t maxIov) {
  maxBytes = std::min(maxBytes, remaining());
  if (!target_.consume) return into_.peek(maxBytes, maxIov);
  size_t space = bounce_->size() - filled_;
  size_t n = std::min(maxBytes, space);
  if (n == 0) return {};
  return {{bounce_->data() + filled_, n}};
}

void RecvCursor::commit(size_t n) {
  committed_ += n;
  if (!target_.consume) {
    into_.advance(n);
    askForMore();
    return;
  }
  filled_ += n;
  size_t ready = done() ? filled_ : filled_ - filled_ % target_.unit;
  if (ready == 0) return;
  target_.consume(bounce_->data(), delivered_, ready);
  delivered_ += ready;
  std::memmove(bounce_->data(), bounce_->data() + ready, filled_ - ready);
  filled_ -= ready;
}

void RecvCursor::write(const void* src, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    IoList dst = next(n);
    size_t moved = 0;
    for (const auto& d : dst) {
      std::memcpy(d.iov_base, p + moved, d.iov_len);
      moved += d.iov_len;
    }
    commit(moved);
    p += moved;
    n -= moved;
  }
}

}  // namespace tfring
