#include "launcher/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "runtime/error.h"
#include "launcher/host_names.h"
#include "runtime/env.h"

namespace etr::launcher {
namespace {

// A numeric IPv4 or IPv6 address (network byte order; 4 bytes used for IPv4).
struct Ip {
  int family = 0;
  unsigned char bytes[16] = {};
  int bits() const { return family == AF_INET ? 32 : 128; }
  bool operator==(const Ip& o) const {
    return family == o.family && std::memcmp(bytes, o.bytes, sizeof bytes) == 0;
  }
};

// `text` as an address ("fe80::1%eth0": the scope is dropped); nullopt when it is none.
std::optional<Ip> parse_ip(std::string_view text) {
  const std::string s(text.substr(0, text.find('%')));
  Ip ip;
  if (inet_pton(AF_INET, s.c_str(), ip.bytes) == 1) {
    ip.family = AF_INET;
  } else if (inet_pton(AF_INET6, s.c_str(), ip.bytes) == 1) {
    ip.family = AF_INET6;
  } else {
    return std::nullopt;
  }
  return ip;
}

std::string ip_text(const Ip& ip) {
  char b[INET6_ADDRSTRLEN] = {};
  inet_ntop(ip.family, ip.bytes, b, sizeof b);
  return b;
}

std::optional<Ip> ip_of(const sockaddr* sa) {
  if (sa == nullptr) return std::nullopt;
  Ip ip;
  ip.family = sa->sa_family;
  if (sa->sa_family == AF_INET) {
    std::memcpy(ip.bytes, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    std::memcpy(ip.bytes, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
  } else {
    return std::nullopt;
  }
  return ip;
}

// `ip` with every bit after the first `prefix` cleared.
Ip masked(Ip ip, int prefix) {
  for (int i = 0; i < 16; ++i) {
    const int keep = std::clamp(prefix - 8 * i, 0, 8);
    ip.bytes[i] &= static_cast<unsigned char>(0xff00u >> keep);
  }
  return ip;
}

bool in_network(const Ip& ip, const Ip& net, int prefix) {
  return ip.family == net.family && masked(ip, prefix) == masked(net, prefix);
}

bool is_loopback(const Ip& ip) {
  if (ip.family == AF_INET) return ip.bytes[0] == 127;
  Ip one{AF_INET6, {}};
  one.bytes[15] = 1;
  return ip == one;
}

std::string quote_printable(std::string_view s) {
  std::string out(1, '\'');  // (not "'" + ...: GCC 12's -Wrestrict misfires on it)
  out += printable(s, 200);
  out += '\'';
  return out;
}

// "lo 127.0.0.1/8, eth0 192.0.2.2/24": this machine's interfaces, for messages.
std::string interface_list() {
  std::string out;
  for (const auto& a : interface_addresses()) {
    if (a.address.rfind("fe80:", 0) == 0) continue;  // link-local: every interface has one
    out += (out.empty() ? "" : ", ") + a.interface + " " + a.address + "/" + std::to_string(a.prefix);
  }
  return out.empty() ? "none" : out;
}

// One item of an interface setting: a network in CIDR form or an interface name; throws
// ConfigError when it is neither. True when this machine has that interface or an address
// on that network.
bool check_iface_item(std::string_view item, const std::string& origin,
                      const std::vector<InterfaceAddress>& mine) {
  const std::string what = origin + " item " + quote_printable(item);
  if (const size_t slash = item.find('/'); slash != std::string_view::npos) {
    const auto net = parse_ip(item.substr(0, slash));
    const std::string_view bits = item.substr(slash + 1);
    int prefix = -1;
    auto [end, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), prefix);
    if (!net || ec != std::errc() || end != bits.data() + bits.size() || prefix < 0 ||
        prefix > net->bits()) {
      throw ConfigError(what + " is not a network in CIDR form (ADDRESS/BITS, e.g. 198.18.0.0/24)");
    }
    return std::any_of(mine.begin(), mine.end(), [&](const InterfaceAddress& a) {
      const auto ip = parse_ip(a.address);
      return ip && in_network(*ip, *net, prefix);
    });
  }
  if (parse_ip(item)) {
    throw ConfigError(what + " is an address, not a network: give its prefix length, e.g. "
                      "198.18.0.0/24, or the interface's name");
  }
  const bool name_chars = std::all_of(item.begin(), item.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':';
  });
  if (item.empty() || item.size() > 15 || !name_chars) {
    throw ConfigError(what + " is neither a network in CIDR form (e.g. 198.18.0.0/24) nor an "
                      "interface name (e.g. eth0)");
  }
  return std::any_of(mine.begin(), mine.end(),
                     [&](const InterfaceAddress& a) { return a.interface == item; });
}

}  // namespace

bool names_this_machine(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  if (host.rfind("127.", 0) == 0 && host.find_first_not_of("0123456789.") == std::string::npos) return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return false;
  const std::string self(name);
  return host == self || (host.size() < self.size() && self.rfind(host + ".", 0) == 0);
}

std::vector<InterfaceAddress> interface_addresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> owner(list, freeifaddrs);
  std::vector<InterfaceAddress> out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    const auto ip = ip_of(i->ifa_addr);
    const auto mask = ip_of(i->ifa_netmask);
    if (!ip) continue;
    int prefix = ip->bits();
    if (mask && mask->family == ip->family) {
      prefix = 0;
      for (int b = 0; b < ip->bits() / 8; ++b) prefix += std::popcount(mask->bytes[b]);
    }
    out.push_back({i->ifa_name, ip_text(*ip), prefix,
                   ip_text(masked(*ip, prefix)) + "/" + std::to_string(prefix)});
  }
  return out;
}

std::vector<std::string> resolve_host(const std::string& host) {
  if (const auto ip = parse_ip(host)) return {ip_text(*ip)};
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
    throw ConfigError("the host " + quote_printable(host) + " does not resolve to an address (" +
                      gai_strerror(rc) + "); check its name or give its address");
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owner(res, freeaddrinfo);
  std::vector<std::string> out;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const auto ip = ip_of(a->ai_addr);
    if (!ip) continue;
    const std::string text = ip_text(*ip);
    if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
  }
  if (out.empty()) throw ConfigError("the host " + quote_printable(host) + " resolves to no IP address");
  return out;
}

bool is_local_address(const std::string& address) {
  const auto ip = parse_ip(address);
  if (!ip) return false;
  if (is_loopback(*ip)) return true;
  for (const auto& a : interface_addresses()) {
    if (parse_ip(a.address) == ip) return true;
  }
  return false;
}

bool resolves_to_this_machine(const std::string& host) {
  try {
    const auto addresses = resolve_host(host);
    return std::any_of(addresses.begin(), addresses.end(), is_local_address);
  } catch (const ConfigError&) {
    return false;
  }
}

InterfaceAddress route_to(const std::string& address) {
  const auto ip = parse_ip(address);
  if (!ip) throw ConfigError(quote_printable(address) + " is not a numeric address");
  sockaddr_storage to = {};
  socklen_t len = 0;
  if (ip->family == AF_INET) {
    auto* s = reinterpret_cast<sockaddr_in*>(&to);
    s->sin_family = AF_INET;
    s->sin_port = htons(9);  // discard; a UDP connect() only picks the route
    std::memcpy(&s->sin_addr, ip->bytes, 4);
    len = sizeof(sockaddr_in);
  } else {
    auto* s = reinterpret_cast<sockaddr_in6*>(&to);
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(9);
    std::memcpy(&s->sin6_addr, ip->bytes, 16);
    len = sizeof(sockaddr_in6);
  }
  const std::string fix = std::string("; set the network the hosts share with ") + kIfaceEnv +
                          " (or etr-run's --iface)";
  const int fd = socket(ip->family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw ConfigError("cannot open a socket to find the route to " + address + ": " + std::strerror(errno) + fix);
  sockaddr_storage from = {};
  socklen_t from_len = sizeof from;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&to), len) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&from), &from_len) == 0;
  const int err = errno;
  close(fd);
  if (!ok) throw ConfigError("this machine has no route to " + address + " (" + std::strerror(err) + ")" + fix);
  const auto source = ip_of(reinterpret_cast<sockaddr*>(&from));
  for (const auto& a : interface_addresses()) {
    if (source && parse_ip(a.address) == source) return a;
  }
  throw ConfigError("the route to " + address + " leaves from " + (source ? ip_text(*source) : "?") +
                    ", which no interface of this machine has" + fix);
}

void check_iface(const std::string& value, const std::string& origin) {
  const auto mine = interface_addresses();
  bool here = false;
  size_t begin = 0;
  for (;;) {
    const size_t comma = std::min(value.find(',', begin), value.size());
    here = check_iface_item(std::string_view(value).substr(begin, comma - begin), origin, mine) || here;
    if (comma == value.size()) break;
    begin = comma + 1;
  }
  if (!here) {
    throw ConfigError(origin + " " + quote_printable(value) + " matches none of this machine's interfaces (" +
                      interface_list() + "); name a network or an interface the hosts share");
  }
}

std::string default_iface(const InterfaceAddress& via, const std::vector<std::string>& remote) {
  std::string out = via.subnet;
  const auto net = parse_ip(via.address);
  std::set<std::string> added;
  for (const auto& r : remote) {
    const auto ip = parse_ip(r);
    if (!ip || !net || in_network(*ip, *net, via.prefix) || !added.insert(ip_text(*ip)).second) continue;
    out += ',';
    out += ip_text(*ip) + "/" + std::to_string(ip->bits());
  }
  return out;
}

MpiNetwork choose_network(const std::vector<std::string>& hosts, const std::string& iface_flag) {
  MpiNetwork n;
  bool includes_this = false;
  std::vector<std::string> remote;  // the first address of each remote host
  for (const auto& host : hosts) {
    if (names_this_machine(host)) {
      includes_this = true;
      continue;
    }
    const auto addresses = resolve_host(host);  // throws for a name that does not resolve
    if (std::any_of(addresses.begin(), addresses.end(), is_local_address)) {
      includes_this = true;
    } else if (std::find(remote.begin(), remote.end(), addresses.front()) == remote.end()) {
      remote.push_back(addresses.front());
    }
  }
  if (remote.empty()) return n;
  n.local = false;
  n.machines = static_cast<int>(remote.size()) + (includes_this ? 1 : 0);
  const char* env = env_value(kIfaceEnv);
  if (!iface_flag.empty()) {
    n.iface = iface_flag;
    n.origin = "--iface";
  } else if (env != nullptr && *env != '\0') {
    n.iface = env;
    n.origin = kIfaceEnv;
  } else {
    n.route_target = remote.front();
    n.iface = default_iface(route_to(remote.front()), remote);
    n.origin = "default";
  }
  if (n.origin != "default") check_iface(n.iface, n.origin);
  return n;
}

std::vector<std::string> MpiNetwork::flags() const {
  if (local) {
    return {"--mca", "pml", "ob1", "--mca", "btl", "self,vader",
            "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo"};
  }
  std::vector<std::string> f = {
      "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_links", "2",
      "--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface,
      "--mca", "plm_rsh_no_tree_spawn", "1"};
  // The remote daemons stay children of their launch agent (Open MPI daemonizes them
  // otherwise), so that the agent's end is the daemon's.
  if (!rsh_agent.empty()) f.insert(f.end(), {"--mca", "orte_leave_session_attached", "1"});
  if (!rsh_agent.empty()) f.insert(f.end(), {"--mca", "plm_rsh_agent", rsh_agent});
  return f;
}

std::string MpiNetwork::describe(std::string_view knob) const {
  if (local) {
    return "every host is this machine: shared memory between the ranks, Open MPI's own "
           "traffic on loopback";
  }
  const std::string from = origin == "default"
                               ? "default route to " + route_target + "; " + std::string(knob) + " to change"
                               : "from " + origin;
  return "hosts span " + std::to_string(machines) + " machine" + (machines == 1 ? "" : "s") +
         ": shared memory within a host, TCP between them on " + iface + " (" + from + ")";
}

std::vector<std::string> without_user_mca(const std::vector<std::string>& flags,
                                          const std::vector<std::string>& user_args) {
  std::set<std::string> theirs;
  for (size_t i = 0; i + 1 < user_args.size(); ++i) {
    const std::string& a = user_args[i];
    if (a == "--mca" || a == "-mca" || a == "--gmca" || a == "-gmca") theirs.insert(user_args[i + 1]);
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] == "--mca" && i + 2 < flags.size() && theirs.count(flags[i + 1])) {
      i += 2;
      continue;
    }
    out.push_back(flags[i]);
  }
  return out;
}

}  // namespace etr::launcher
