// Host lists as etr-run reads them (--hosts, a hostfile, a discovery script's output),
// checked before any of it reaches mpirun: every host is an RFC 1123 name or an IPv4 or
// IPv6 address, every slot count a whole number from 1 to kMaxSlotsPerHost. What is
// refused is quoted escaped (printable()), so bytes of a damaged file cannot reach the
// terminal raw.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace etr::launcher {

struct HostSlots {
  std::string host;
  int slots = 1;
  bool operator==(const HostSlots&) const = default;
};

// Bounds of a host list: slots on one host (after adding up repeats) and in all.
inline constexpr int kMaxSlotsPerHost = 4096;
inline constexpr int kMaxTotalSlots = 65536;

// `text` with every byte that is not printable ASCII written as \xNN (and '\' as \\),
// cut to about `max_chars` with "... (N bytes)" after it.
std::string printable(std::string_view text, size_t max_chars = 80);

// Why `host` cannot be a host name: "" when it is an RFC 1123 name (labels of letters,
// digits and inner '-', at most 63 characters each, 253 in all; all-digit labels only as
// an IPv4 address), an IPv4 address or an IPv6 address.
std::string host_name_problem(std::string_view host);

// One item of a host list: "HOST", "HOST:SLOTS", an IPv6 address, "[IPV6]" or
// "[IPV6]:SLOTS". Throws ConfigError saying what is wrong with it (without the item).
HostSlots parse_host_item(std::string_view item);

// "h1:2,h2" (--hosts) -> {{"h1", 2}, {"h2", 1}}. A host named twice has its slots
// added. Throws ConfigError quoting the item.
std::vector<HostSlots> parse_host_list(const std::string& text);
// A hostfile or a discovery script's output: one host per line, as "host", "host:N" or
// "host slots=N" (Open MPI's hostfile syntax); '#' starts a comment; blank lines are
// skipped. A host named twice has its slots added. Throws ConfigError naming `source`
// and the line.
std::vector<HostSlots> parse_host_lines(const std::string& text, const std::string& source);
// "h1:2,h2:1", the form mpirun's --host takes (an IPv6 address in brackets).
std::string format_hosts(const std::vector<HostSlots>& hosts);
int total_slots(const std::vector<HostSlots>& hosts);

}  // namespace etr::launcher
