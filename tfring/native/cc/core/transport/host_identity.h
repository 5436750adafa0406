// Which ranks share a host, and so may share memory: those whose host identities are equal.
//
// Detected, the identity is the hostname, the boot id and the network namespace (as Horovod's
// host hash). The hostname alone is not enough: containers may share one. The boot id tells one
// boot of one kernel from another, but two network namespaces on one kernel (hosts emulated with
// `ip netns`, containers that share a kernel but not a network) would still read as one host,
// and would share memory: wrong for emulated hosts, and for containers that share a kernel but not
// their /dev/shm. The setting host_id (TFRING_HOST_ID) replaces detection, as NCCL_HOSTID does.
#pragma once

#include <string>

namespace tfring {

// The parts of the identity this process detects; an empty part is one the OS did not tell.
struct HostFacts {
  std::string hostName;      // gethostname()
  std::string bootId;        // /proc/sys/kernel/random/boot_id
  std::string netNamespace;  // readlink /proc/self/ns/net: "net:[4026531833]"
};

HostFacts detectHostFacts();

// "hostname/boot id/net:[inode]". No part holds a space: rendezvous publishes the identity in a
// space-separated record.
std::string hostIdentity(const HostFacts& facts);

// `hostId` (the setting host_id) when it is not empty, else the identity detected here.
std::string localHostIdentity(const std::string& hostId);

}  // namespace tfring
