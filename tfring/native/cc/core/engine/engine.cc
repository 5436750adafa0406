#include "engine/engine.h"

#include <cstring>
#include <sstream>

#include "algorithms/allgather_ring.h"
#include "algorithms/allreduce_ring.h"
#include "algorithms/broadcast_ring.h"
#include "rendezvous/hmac.h"

namespace tfring {
namespace {

// Tensors below this size are packed into the fusion buffer; larger ones are reduced where they
// lie (the ring reads them in place), which avoids two full copies of big gradients.
constexpr size_t kPackBelow = 256 << 10;

const char* kindName(OpKind k) {
  switch (k) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kBarrier: return "barrier";
  }
  return "collective";
}

std::string shapeText(const std::vector<int64_t>& shape, size_t from) {
  std::string s = "[";
  for (size_t i = from; i < shape.size(); ++i) {
    if (i > from) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// One line for the call, one per tensor: what must agree across ranks.
std::vector<std::string> describe(const Request& r) {
  std::vector<std::string> lines;
  std::ostringstream head;
  head << kindName(r.kind) << " dtype=" << dataTypeName(r.type);
  if (r.kind == OpKind::kAllreduce) head << " op=" << reduceOpName(r.op);
  if (r.kind == OpKind::kBroadcast) head << " root=" << r.root;
  head << " tensors=" << r.tensors.size();
  lines.push_back(head.str());
  for (const auto& t : r.tensors) {
    if (r.kind != OpKind::kAllgather) {
      lines.push_back(shapeText(t.shape, 0));
    } else {  // the first dimension may differ; the rest must match
      lines.push_back(t.shape.size() > 1 ? "[*, " + shapeText(t.shape, 1).substr(1) : "[*]");
    }
  }
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// `all[k]` is rank k's description, then a last line "name: <op name>" (not part of the digest:
// names only make the message clearer, e.g. which rank was saving a model).
std::string mismatchMessage(const Request& r, const std::vector<std::string>& all) {
  auto described = [](const std::string& text, std::string* name) {
    auto lines = split(text);
    if (!lines.empty() && lines.back().rfind("name: ", 0) == 0) {
      *name = lines.back().substr(6);
      lines.pop_back();
    }
    return lines;
  };
  std::string name0, namek;
  auto first = described(all[0], &name0);
  for (size_t k = 1; k < all.size(); ++k) {
    auto other = described(all[k], &namek);
    if (other == first) continue;
    std::string prefix = std::string("tfring.") + kindName(r.kind) + " '" + r.name +
                         "': ranks passed different inputs: ";
    if (first[0] != other[0]) {
      return prefix + "rank 0 called " + first[0] + " ('" + name0 + "') but rank " + std::to_string(k) + " called " +
             other[0] + " ('" + namek + "') (if this is not a bug in the program, the ranks are out of step: did " +
             "they run different numbers of steps, e.g. on datasets of different sizes?)";
    }
    for (size_t i = 1; i < first.size() && i < other.size(); ++i) {
      if (first[i] != other[i] && first[i].rfind("passes:", 0) == 0) {
        return prefix + "rank 0 cuts lists into " + first[i] + " but rank " + std::to_string(k) + " into " + other[i];
      }
      if (first[i] != other[i]) {
        return prefix + "tensor " + std::to_string(i - 1) + " has shape " + first[i] + " on rank 0 but " +
               other[i] + " on rank " + std::to_string(k);
      }
    }
  }
  return std::string("tfring.") + kindName(r.kind) + " '" + r.name + "': ranks passed different inputs";
}

}  // namespace

Engine::Engine(const Config& config, std::unique_ptr<Transport> transport, std::shared_ptr<Store> store)
    : config_(config), transport_(std::move(transport)), store_(std::move(store)) {
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (transport_) transport_->abort();  // unblocks a collective still waiting on a peer
  thread_.join();
}

std::string Engine::transportName() const { return transport_ ? transport_->name() : "none (1 rank)"; }

void Engine::enqueue(Request request) {
  Status failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok && !stop_) {
      queue_.push_back(std::move(request));
      cv_.notify_one();
      return;
    }
    failed = failure_.ok ? Status::error(Code::kFailedPrecondition, "tfring was shut down") : failure_;
  }
  request.done(failed);
}

void Engine::loop() {
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      r = std::move(queue_.front());
      queue_.pop_front();
    }
    Status failed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed = failure_;
      if (stop_ && failed.ok) failed = Status::error(Code::kFailedPrecondition, "tfring was shut down");
    }
    if (!failed.ok) {
      r.done(failed);
      continue;
    }
    execute(r);
  }
}

void Engine::execute(Request& r) {
  const Deadline deadline = Deadline::after(config_.collectiveTimeout);
  try {
    validate(r, deadline);
    if (r.staged) {
      staged(r, deadline);
      r.done(Status());
      return;
    }
    switch (r.kind) {
      case OpKind::kAllreduce:
        allreduce(r, deadline);
        break;
      case OpKind::kBroadcast: {
        IoList data;
        for (auto& t : r.tensors) {
          if (t.in != t.out && t.bytes) std::memcpy(t.out, t.in, t.bytes);
          data.push_back({t.out, t.bytes});
        }
        ringBroadcast(transport_.get(), config_.size, r.root, data, deadline);
        break;
      }
      case OpKind::kAllgather:
        allgather(r, deadline);
        break;
      case OpKind::kBarrier:
        ringBarrier(transport_.get(), config_.size, deadline);
        break;
    }
    r.done(Status());
  } catch (const PeerError& e) {
    r.done(fail(std::string("tfring.") + kindName(r.kind) + " '" + r.name + "' failed on rank " +
                    std::to_string(config_.rank) + ": " + e.what(),
                e.rank()));
  } catch (const Error& e) {
    r.done(Status::error(e.code(), e.what()));
  } catch (const std::exception& e) {
    r.done(Status::error(Code::kInternal, e.what()));
  }
}

void Engine::validate(const Request& r, Deadline d) {
  if (config_.size == 1) return;
  // The last line is how this rank cuts a list into passes: agreed at init, checked again here.
  std::string mine = join(describe(r)) + "passes: fusion_threshold_bytes=" +
                     std::to_string(config_.fusionThresholdBytes) + " pack_below=" + std::to_string(kPackBelow) + "\n";
  std::vector<Digest> digests(config_.size);
  digests[config_.rank] = sha256(mine.data(), mine.size());
  ringAllgather(transport_.get(), config_.size, {{digests.data(), digests.size() * sizeof(Digest)}},
                std::vector<size_t>(config_.size, sizeof(Digest)), d);
  bool same = true;
  for (const auto& dg : digests) same = same && dg == digests[0];
  if (same) return;
  // Every rank saw the same digests, so every rank takes this path and the ring stays in step.
  auto all = allgatherStrings(transport_.get(), config_.size, mine + "name: " + r.name + "\n", d);
  throw Error(Code::kInvalidArgument, mismatchMessage(r, all));
}

void Engine::allreduce(Request& r, Deadline d) {
  const size_t threshold = config_.fusionThresholdBytes;
  size_t i = 0;
  while (i < r.tensors.size()) {
    // One pass: consecutive tensors up to `threshold` bytes (a bigger tensor goes alone).
    size_t j = i, passBytes = 0, packBytes = 0;
    do {
      passBytes += r.tensors[j].bytes;
      if (threshold > 0 && r.tensors[j].bytes < kPackBelow) packBytes += r.tensors[j].bytes;
      ++j;
    } while (threshold > 0 && j < r.tensors.size() && passBytes + r.tensors[j].bytes <= threshold);
    if (fusion_.size() < packBytes) fusion_.resize(packBytes);

    IoList in, out;
    size_t at = 0;
    if (packBytes) {
      for (size_t k = i; k < j; ++k) {
        const auto& t = r.tensors[k];
        if (t.bytes >= kPackBelow) continue;
        if (t.bytes) std::memcpy(fusion_.data() + at, t.in, t.bytes);
        at += t.bytes;
      }
      in.push_back({fusion_.data(), packBytes});
      out.push_back({fusion_.data(), packBytes});
    }
    for (size_t k = i; k < j; ++k) {
      auto& t = r.tensors[k];
      if (packBytes && t.bytes < kPackBelow) continue;
      in.push_back({const_cast<void*>(t.in), t.bytes});
      out.push_back({t.out, t.bytes});
    }
    ringAllreduce(transport_.get(), config_.size, in, out, r.type, r.op, d);
    at = 0;
    if (packBytes) {
      for (size_t k = i; k < j; ++k) {
        auto& t = r.tensors[k];
        if (t.bytes >= kPackBelow) continue;
        if (t.bytes) std::memcpy(t.out, fusion_.data() + at, t.bytes);
        at += t.bytes;
      }
    }
    i = j;
  }
}

void Engine::staged(Request& r, Deadline d) {
  if (r.kind != OpKind::kAllreduce && r.kind != OpKind::kBroadcast) {
    throw Error(Code::kInvalidArgument, std::string("tfring.") + kindName(r.kind) + " '" + r.name +
                                            "': only allreduce and broadcast take staged (device) tensors");
  }
  r.staged([&](void* data, size_t bytes) {
    IoList piece = {{data, bytes}};
    if (r.kind == OpKind::kAllreduce) {
      ringAllreduce(transport_.get(), config_.size, piece, piece, r.type, r.op, d);
    } else {
      ringBroadcast(transport_.get(), config_.size, r.root, piece, d);
    }
  });
}

void Engine::allgather(Request& r, Deadline d) {
  const TensorRef& t = r.tensors.at(0);
  const int64_t first = t.shape.empty() ? 1 : t.shape[0];
  std::vector<int64_t> dims(config_.size, 0);
  dims[config_.rank] = first;
  ringAllgather(transport_.get(), config_.size, {{dims.data(), dims.size() * sizeof(int64_t)}},
                std::vector<size_t>(config_.size, sizeof(int64_t)), d);
  // Rows have the same size on every rank (validated above), computed from the trailing
  // dimensions so that a rank with zero rows agrees too.
  size_t rowBytes = dataTypeSize(r.type);
  for (size_t q = 1; q < t.shape.size(); ++q) rowBytes *= static_cast<size_t>(t.shape[q]);
  std::vector<size_t> blocks(config_.size);
  size_t total = 0, mineAt = 0;
  for (int k = 0; k < config_.size; ++k) {
    blocks[k] = static_cast<size_t>(dims[k]) * rowBytes;
    if (k < config_.rank) mineAt += blocks[k];
    total += blocks[k];
  }
  std::string error;
  void* out = r.allocate(dims, &error);
  std::vector<uint8_t> scratch;
  const bool allocFailed = !error.empty() || (out == nullptr && total > 0);
  if (allocFailed) {
    // Still take part in the exchange, so the other ranks are not left waiting.
    scratch.resize(total);
    out = scratch.data();
  }
  if (t.bytes) std::memcpy(static_cast<uint8_t*>(out) + mineAt, t.in, t.bytes);
  ringAllgather(transport_.get(), config_.size, {{out, total}}, blocks, d);
  if (allocFailed) throw Error(Code::kInternal, "allgather could not allocate its output: " + error);
}

Status Engine::fail(const std::string& what, int peer) {
  std::string message = what;
  if (store_) {
    // Leave the first failure's reason for the other ranks, or read the one already there: a rank
    // whose neighbour merely aborted learns which rank really failed.
    try {
      std::string prior;
      if (store_->tryGet("abort", &prior)) {
        message += " (first failure, reported by another rank: " + prior + ")";
      } else {
        store_->set("abort", what);
      }
    } catch (const std::exception&) {
      if (peer != 0 && config_.rank != 0) message += " (the rendezvous store on rank 0 is gone too)";
    }
  }
  if (transport_) transport_->abort();
  std::deque<Request> pending;
  Status status = Status::error(Code::kUnavailable, message);
  {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = status;
    pending.swap(queue_);
  }
  for (auto& q : pending) q.done(status);
  return status;
}

}  // namespace tfring
