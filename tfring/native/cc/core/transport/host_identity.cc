#include "transport/host_identity.h"

#include <unistd.h>

#include <fstream>

namespace tfring {
namespace {

std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string bootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

// The namespace's inode, which the kernel shows as the link's target; "" where /proc does not say.
std::string netNamespace() {
  char buf[64];
  const ssize_t n = readlink("/proc/self/ns/net", buf, sizeof(buf));
  return n > 0 && static_cast<size_t>(n) < sizeof(buf) ? std::string(buf, static_cast<size_t>(n)) : "";
}

}  // namespace

HostFacts detectHostFacts() { return {hostName(), bootId(), netNamespace()}; }

std::string hostIdentity(const HostFacts& f) { return f.hostName + "/" + f.bootId + "/" + f.netNamespace; }

std::string localHostIdentity(const std::string& hostId) {
  return hostId.empty() ? hostIdentity(detectHostFacts()) : hostId;
}

}  // namespace tfring
