#include "tools/netdev.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace uroce::tools {

uint32_t netdev_mtu(const std::string& netdev) {
  if (netdev.empty() || netdev.size() >= IFNAMSIZ) return 0;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, netdev.c_str(), netdev.size());
  uint32_t mtu = 0;
  if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0) mtu = static_cast<uint32_t>(ifr.ifr_mtu);
  close(fd);
  return mtu;
}

uint32_t ib_mtu_for(uint32_t if_mtu) {
  constexpr uint32_t kRoceOverhead = 20 + 8 + 12 + 16 + 4 + 4;
  if (if_mtu == 0) if_mtu = 1500;
  for (uint32_t m : {4096u, 2048u, 1024u, 512u, 256u})
    if (m + kRoceOverhead <= if_mtu) return m;
  return 256;
}

}  // namespace uroce::tools
