#include "launcher/host_names.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstdio>
#include <sstream>
#include <unordered_map>

#include "runtime/error.h"

namespace etr::launcher {
namespace {

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::string quote_printable(std::string_view s) {
  std::string out = printable(s);
  out.insert(out.begin(), '\'');
  out.push_back('\'');
  return out;
}

bool is_ipv4(std::string_view s) {
  in_addr a;
  return inet_pton(AF_INET, std::string(s).c_str(), &a) == 1;
}

bool is_ipv6(std::string_view s) {
  in6_addr a;
  return inet_pton(AF_INET6, std::string(s).c_str(), &a) == 1;
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

// The slot count of an item or a "slots=" value: 1..kMaxSlotsPerHost.
int parse_slots(std::string_view text) {
  int n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p != text.data() + text.size() || n < 1 || n > kMaxSlotsPerHost) {
    throw ConfigError("the slot count " + quote_printable(text) + " is not a whole number from 1 to " +
                      std::to_string(kMaxSlotsPerHost));
  }
  return n;
}

// A host list in first-seen order; a repeated host has its slots added, within the bounds.
class HostAccumulator {
 public:
  void add(const HostSlots& h) {
    auto [it, fresh] = index_.try_emplace(h.host, hosts_.size());
    if (fresh) hosts_.push_back({h.host, 0});
    HostSlots& mine = hosts_[it->second];
    if (mine.slots + h.slots > kMaxSlotsPerHost) {
      throw ConfigError("host " + quote_printable(h.host) + " is given more than " +
                        std::to_string(kMaxSlotsPerHost) + " slots in all");
    }
    if (total_ + h.slots > kMaxTotalSlots) {
      throw ConfigError("the hosts have more than " + std::to_string(kMaxTotalSlots) +
                        " slots in all");
    }
    mine.slots += h.slots;
    total_ += h.slots;
  }
  std::vector<HostSlots> take() { return std::move(hosts_); }

 private:
  std::vector<HostSlots> hosts_;
  std::unordered_map<std::string, size_t> index_;
  int total_ = 0;
};

}  // namespace

std::string printable(std::string_view text, size_t max_chars) {
  std::string out;
  size_t used = 0;
  for (; used < text.size() && out.size() < max_chars; ++used) {
    const auto c = static_cast<unsigned char>(text[used]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  if (used < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string host_name_problem(std::string_view host) {
  if (host.empty()) return "there is no host name";
  if (is_ipv4(host) || is_ipv6(host)) return "";
  for (char c : host) {
    if (!name_char(c) && c != '.') {
      return quote_printable(host) + " is not a host name: " + quote_printable(std::string_view(&c, 1)) +
             " is not a letter, digit, '-' or '.'";
    }
  }
  if (host.size() > 253) return quote_printable(host) + " is not a host name: longer than 253 characters";
  bool all_digits = true;
  size_t begin = 0;
  for (;;) {
    const size_t dot = std::min(host.find('.', begin), host.size());
    const std::string_view label = host.substr(begin, dot - begin);
    if (label.empty()) return quote_printable(host) + " is not a host name: it has an empty label";
    if (label.size() > 63) {
      return quote_printable(host) + " is not a host name: a label is longer than 63 characters";
    }
    if (label.front() == '-' || label.back() == '-') {
      return quote_printable(host) + " is not a host name: a label starts or ends with '-'";
    }
    all_digits = all_digits && label.find_first_not_of("0123456789") == std::string_view::npos;
    if (dot == host.size()) break;
    begin = dot + 1;
  }
  if (all_digits) return quote_printable(host) + " is not an IPv4 address";
  return "";
}

HostSlots parse_host_item(std::string_view item) {
  HostSlots out;
  std::string_view host = item;
  if (!item.empty() && item.front() == '[') {  // [IPV6] or [IPV6]:SLOTS
    const size_t close = item.find(']');
    if (close == std::string_view::npos) throw ConfigError("there is no ']' after the '['");
    host = item.substr(1, close - 1);
    const std::string_view rest = item.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw ConfigError("expected ':SLOTS' after the ']'");
      out.slots = parse_slots(rest.substr(1));
    }
    if (!is_ipv6(host)) throw ConfigError(quote_printable(host) + " in brackets is not an IPv6 address");
  } else if (is_ipv6(item)) {  // a bare IPv6 address: one slot
    host = item;
  } else if (const size_t colon = item.rfind(':'); colon != std::string_view::npos) {
    host = item.substr(0, colon);
    if (host.empty()) throw ConfigError("there is no host name before the ':'");
    out.slots = parse_slots(item.substr(colon + 1));
  }
  if (const std::string why = host_name_problem(host); !why.empty()) throw ConfigError(why);
  out.host = std::string(host);
  return out;
}

std::vector<HostSlots> parse_host_list(const std::string& text) {
  HostAccumulator out;
  std::string_view rest = text;
  for (;;) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (!item.empty()) {
      try {
        out.add(parse_host_item(item));
      } catch (const ConfigError& e) {
        throw ConfigError("--hosts item " + quote_printable(item) + ": " + e.what() +
                          "; write HOST or HOST:SLOTS, e.g. node1:2");
      }
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out.take();
}

std::vector<HostSlots> parse_host_lines(const std::string& text, const std::string& source) {
  HostAccumulator out;
  std::istringstream in(text);
  std::string raw;
  int number = 0;
  while (std::getline(in, raw)) {
    ++number;
    const std::string_view line = trim(std::string_view(raw).substr(0, raw.find('#')));
    if (line.empty()) continue;
    try {
      const size_t space = line.find_first_of(" \t");
      if (space == std::string_view::npos) {
        out.add(parse_host_item(line));
        continue;
      }
      const std::string_view rest = trim(line.substr(space));
      std::string_view host = line.substr(0, space);
      if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
      }
      if (const std::string why = host_name_problem(host); !why.empty()) throw ConfigError(why);
      if (rest.substr(0, 6) != "slots=") throw ConfigError("expected slots=N after the host name");
      out.add({std::string(host), parse_slots(rest.substr(6))});
    } catch (const ConfigError& e) {
      throw ConfigError(printable(source, 200) + ", line " + std::to_string(number) + " (" +
                        quote_printable(line) + "): " + e.what() +
                        "; write HOST, HOST:SLOTS or HOST slots=SLOTS");
    }
  }
  return out.take();
}

std::string format_hosts(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ',';
    out += (is_ipv6(h.host) ? "[" + h.host + "]" : h.host) + ':' + std::to_string(h.slots);
  }
  return out;
}

int total_slots(const std::vector<HostSlots>& hosts) {
  int n = 0;
  for (const auto& h : hosts) n += h.slots;
  return n;
}

}  // namespace etr::launcher
