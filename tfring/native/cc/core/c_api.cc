// A plain C interface to the runtime for Python's ctypes: init / shutdown / topology, the
// detected host identity, synchronous collectives on raw buffers (used by tests and benchmarks
// that need no TensorFlow), and the signature of Python objects sent between ranks.
// Calls that can fail return a tfring::Code value (0 = OK; error_code.h) and write the message
// into `err`; tfring_error_name() turns a code into its name.
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "rendezvous/hmac.h"
#include "runtime.h"
#include "transport/host_identity.h"

using tfring::Code;
using tfring::Config;
using tfring::Error;
using tfring::Runtime;

namespace {

int report(const std::string& msg, Code code, char* err, size_t errlen) {
  if (err && errlen) {
    std::strncpy(err, msg.c_str(), errlen - 1);
    err[errlen - 1] = '\0';
  }
  // An error never reads as success, even one thrown with the wrong code.
  return static_cast<int>(code == Code::kOk ? Code::kInternal : code);
}

int run(tfring::Request req, char* err, size_t errlen) {
  auto rt = Runtime::current();
  if (!rt) return report("tfring.init() has not been called", Code::kFailedPrecondition, err, errlen);
  std::promise<tfring::Status> p;
  auto f = p.get_future();
  req.done = [&p](const tfring::Status& s) { p.set_value(s); };
  rt->engine().enqueue(std::move(req));
  tfring::Status s = f.get();
  return s.ok() ? 0 : report(s.message, s.code, err, errlen);
}

}  // namespace

extern "C" {

int tfring_init(const char* config, char* err, size_t errlen) {
  try {
    Runtime::init(Config::parse(config));
    return 0;
  } catch (const Error& e) {
    return report(e.what(), e.code(), err, errlen);
  } catch (const std::exception& e) {
    return report(e.what(), Code::kInternal, err, errlen);
  }
}

void tfring_shutdown() { Runtime::shutdown(); }

int tfring_initialized() { return Runtime::current() ? 1 : 0; }

// "INVALID_ARGUMENT" for the code tfring_init returned, and so on; "UNKNOWN" outside the list.
const char* tfring_error_name(int code) { return tfring::codeName(code); }

int tfring_topology(int* rank, int* size, int* localRank, int* localSize) {
  auto rt = Runtime::current();
  if (!rt) return static_cast<int>(Code::kFailedPrecondition);
  *rank = rt->config().rank;
  *size = rt->config().size;
  *localRank = rt->config().localRank;
  *localSize = rt->config().localSize;
  return 0;
}

int tfring_transport_name(char* buf, size_t len) {
  auto rt = Runtime::current();
  if (!rt) return static_cast<int>(Code::kFailedPrecondition);
  std::string n = rt->engine().transportName();
  std::strncpy(buf, n.c_str(), len - 1);
  buf[len - 1] = '\0';
  return 0;
}

// This machine's host identity as detected (hostname/boot id/network namespace): the one a rank
// publishes unless the setting host_id replaces it. Needs no runtime.
void tfring_host_identity(char* buf, size_t len) {
  if (!buf || !len) return;
  std::strncpy(buf, tfring::localHostIdentity("").c_str(), len - 1);
  buf[len - 1] = '\0';
}

// Reduces n buffers (counts[i] elements each) in one collective.
int tfring_allreduce_raw(int n, const void* const* in, void* const* out, const int64_t* counts,
                         int dtype, int op, char* err, size_t errlen) {
  tfring::Request req;
  req.kind = tfring::OpKind::kAllreduce;
  req.name = "raw";
  req.type = static_cast<tfring::DataType>(dtype);
  req.op = static_cast<tfring::ReduceOp>(op);
  try {
    size_t elem = tfring::dataTypeSize(req.type);
    for (int i = 0; i < n; ++i) {
      req.tensors.push_back({in[i], out[i], static_cast<size_t>(counts[i]) * elem, {counts[i]}});
    }
  } catch (const Error& e) {
    return report(e.what(), e.code(), err, errlen);
  }
  return run(std::move(req), err, errlen);
}

// This rank's collectives since init (engine/traffic.h), per kind in OpKind order: calls[k] and
// bytes[k] for k < n. Returns 0, or -1 before init.
int tfring_traffic(int64_t* calls, int64_t* bytes, int64_t* waitedNs, int n) {
  auto rt = Runtime::current();
  if (!rt) return -1;
  for (int k = 0; k < n && k < tfring::Traffic::kKinds; ++k) {
    const auto kind = static_cast<tfring::OpKind>(k);
    calls[k] = rt->engine().traffic().calls(kind);
    bytes[k] = rt->engine().traffic().bytes(kind);
    waitedNs[k] = rt->engine().traffic().waitedNs(kind);
  }
  return 0;
}

// HMAC-SHA256, with the job secret, of "tfring object v1\n" followed by the n bytes at data (the
// prefix keeps these signatures apart from the rendezvous' own): the Python object collectives
// sign what they pickle and check it before they unpickle. Writes 32 bytes to out; returns 0,
// or FAILED_PRECONDITION before init.
int tfring_sign_object(const void* data, size_t n, unsigned char* out) {
  auto rt = Runtime::current();
  if (!rt) return static_cast<int>(Code::kFailedPrecondition);
  std::string message = "tfring object v1\n";
  message.append(static_cast<const char*>(data), n);
  const tfring::Digest d = tfring::hmacSha256(rt->config().secret, message.data(), message.size());
  std::memcpy(out, d.data(), d.size());
  return 0;
}

// Adds the process set of the n job ranks at `ranks` (process_sets.h) and writes its id to *id.
// Every rank of the job calls it with the same ranks; members block until all members have come.
int tfring_add_process_set(const int* ranks, int n, int* id, char* err, size_t errlen) {
  auto rt = Runtime::current();
  if (!rt) return report("tfring.init() has not been called", Code::kFailedPrecondition, err, errlen);
  try {
    *id = rt->processSets().add(std::vector<int>(ranks, ranks + n));
    return 0;
  } catch (const Error& e) {
    return report(e.what(), e.code(), err, errlen);
  }
}

// The id of the process set of the n ranks at `ranks`, or -1 (none, or before init).
int tfring_process_set_id(const int* ranks, int n) {
  auto rt = Runtime::current();
  return rt ? rt->processSets().idOf(std::vector<int>(ranks, ranks + n)) : -1;
}

// 1 when process set `id` existed and is removed, 0 otherwise (or before init).
int tfring_remove_process_set(int id) {
  auto rt = Runtime::current();
  return rt && rt->processSets().remove(id) ? 1 : 0;
}

// Writes the ranks of process set `id` (at most `cap`) to `ranks` and their count to *n.
int tfring_process_set_ranks(int id, int* ranks, int cap, int* n, char* err, size_t errlen) {
  auto rt = Runtime::current();
  if (!rt) return report("tfring.init() has not been called", Code::kFailedPrecondition, err, errlen);
  try {
    const std::vector<int> members = rt->processSets().ranks(id);
    *n = static_cast<int>(members.size());
    for (int k = 0; k < *n && k < cap; ++k) ranks[k] = members[k];
    return 0;
  } catch (const Error& e) {
    return report(e.what(), e.code(), err, errlen);
  }
}

int tfring_barrier_raw(char* err, size_t errlen) {
  tfring::Request req;
  req.kind = tfring::OpKind::kBarrier;
  req.name = "barrier";
  return run(std::move(req), err, errlen);
}

}  // extern "C"
