#include "launcher/hosts.h"

#include <algorithm>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "launcher/network.h"
#include "launcher/srun_launch.h"
#include "runtime/error.h"

namespace etr::launcher {

bool is_local_host(const std::string& host) {
  return names_this_machine(host) || resolves_to_this_machine(host);
}

namespace {

// A hostfile, at most kMaxHostfileBytes (a device or a damaged file could be endless).
std::vector<HostSlots> read_hostfile(const std::string& path) {
  constexpr size_t kMaxHostfileBytes = size_t{1} << 20;
  const std::string name = "the hostfile " + printable(path, 200);
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw IoError("cannot read " + name + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw IoError(name + " is a directory; name a file of hosts");
  if (!S_ISREG(st.st_mode)) {  // a FIFO would block, a device never end
    throw IoError(name + " is not a regular file (etr-run re-reads it at every discovery); "
                  "write the hosts to a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read " + name + ": " + std::strerror(errno));
  std::string text(kMaxHostfileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxHostfileBytes) {
    throw IoError(name + " is larger than 1 MiB; it should hold one line per host");
  }
  return parse_host_lines(text, "hostfile " + path);
}

}  // namespace

std::string HostSource::describe() const {
  switch (kind_) {
    case Kind::kList: return "--hosts " + printable(value_, 200);
    case Kind::kFile: return "hostfile " + printable(value_, 200);
    case Kind::kScript: return "discovery script " + printable(value_, 200);
    case Kind::kSlurm: return "the nodes of the Slurm allocation";
  }
  return printable(value_, 200);
}

bool Discovery::poll(std::chrono::milliseconds wait) { return !script_ || script_->poll(wait); }

std::vector<HostSlots> Discovery::result() const {
  if (error_) std::rethrow_exception(error_);
  return script_ ? script_->result() : hosts_;
}

Discovery HostSource::start(std::chrono::milliseconds script_timeout) const {
  Discovery d;
  if (kind_ == Kind::kScript || kind_ == Kind::kSlurm) {
    std::vector<std::string> args;
    if (kind_ == Kind::kSlurm) args.push_back(kSlurmNodesFlag);
    d.script_ = std::make_unique<DiscoveryScript>(value_, script_timeout, std::move(args));
    return d;
  }
  try {
    d.hosts_ = kind_ == Kind::kList ? parse_host_list(value_) : read_hostfile(value_);
  } catch (const Error&) {
    d.error_ = std::current_exception();
  }
  return d;
}

std::vector<HostSlots> HostSource::discover(std::chrono::milliseconds script_timeout,
                                            const std::function<bool()>& cancelled) const {
  Discovery d = start(script_timeout);
  while (!d.poll(std::chrono::milliseconds(50))) {
    if (cancelled && cancelled()) {
      throw IoError("the host discovery script " + printable(value_, 200) +
                    " was ended: etr-run is stopping");
    }
  }
  return d.result();
}

bool HostHealth::record_failure(const std::string& host, Clock::time_point now) {
  State& s = state_[host];
  if (s.excluded && now >= s.excluded_until) s = State{};  // its cool-down is over
  ++s.failures;
  if (blacklist_after_ > 0 && s.failures >= blacklist_after_ && !s.excluded) {
    s.excluded = true;
    s.excluded_until = now + cooldown_;
    return true;
  }
  return false;
}

void HostHealth::exclude_now(const std::string& host, Clock::time_point now, bool unreachable) {
  State& s = state_[host];
  s.excluded = true;
  s.absent = false;
  s.unreachable = unreachable;
  s.excluded_until = now + cooldown_;
}

std::vector<std::string> HostHealth::unreachable_excluded(Clock::time_point now) const {
  std::vector<std::string> out;
  for (const auto& [name, s] : state_) {
    if (s.excluded && s.unreachable && now < s.excluded_until) out.push_back(name);
  }
  return out;
}

void HostHealth::readmit(const std::string& host) {
  auto it = state_.find(host);
  if (it != state_.end()) it->second = State{};
}

bool HostHealth::excluded(const std::string& host, Clock::time_point now) const {
  auto it = state_.find(host);
  return it != state_.end() && it->second.excluded && now < it->second.excluded_until;
}

int HostHealth::failures(const std::string& host) const {
  auto it = state_.find(host);
  return it == state_.end() ? 0 : it->second.failures;
}

std::vector<HostSlots> HostHealth::usable(const std::vector<HostSlots>& hosts, Clock::time_point now) {
  // An excluded host that discovery stopped listing was seen to be gone (its scheduler
  // took it out); listed again, it is back (repaired, rebooted): a fresh start.
  for (auto& [name, s] : state_) {
    const bool listed = std::any_of(hosts.begin(), hosts.end(),
                                    [&name](const HostSlots& h) { return h.host == name; });
    if (s.excluded && !listed) s.absent = true;
  }
  std::vector<HostSlots> out;
  for (const auto& h : hosts) {
    auto it = state_.find(h.host);
    if (it != state_.end() && it->second.excluded) {
      if (now < it->second.excluded_until && !it->second.absent) continue;
      it->second = State{};  // cool-down over, or back after it was gone: a fresh start
    }
    if (h.slots > 0) out.push_back(h);
  }
  return out;
}

std::vector<HostSlots> take_slots(const std::vector<HostSlots>& hosts, int np,
                                  const std::vector<HostSlots>& previous) {
  const auto find = [](const std::vector<HostSlots>& in, const std::string& host) {
    return std::find_if(in.begin(), in.end(), [&](const HostSlots& h) { return h.host == host; });
  };
  std::vector<HostSlots> order;
  for (const auto& p : previous) {
    const auto it = find(hosts, p.host);
    if (it != hosts.end() && find(order, p.host) == order.end()) order.push_back(*it);
  }
  for (const auto& h : hosts) {
    if (find(order, h.host) == order.end()) order.push_back(h);
  }
  std::vector<HostSlots> out;
  for (const auto& h : order) {
    if (np <= 0) break;
    const int n = std::min(np, h.slots);
    if (n > 0) out.push_back({h.host, n});
    np -= n;
  }
  return out;
}

// Why a job on `np` ranks on `hosts` should resize now that discovery reports
// `now_hosts`: more usable slots (up to max_np), or fewer than it uses; "" when neither.
std::string resize_reason(const std::vector<HostSlots>& hosts, int np,
                          const std::vector<HostSlots>& now_hosts, int max_np, int pp) {
  for (const auto& h : hosts) {
    int avail = 0;
    for (const auto& a : now_hosts) {
      if (a.host == h.host) avail = a.slots;
    }
    if (avail < h.slots) {
      return "discovery no longer lists all of the job's slots (now " + format_hosts(now_hosts) + ")";
    }
  }
  const int have = total_slots(now_hosts);
  pp = std::max(1, pp);
  if (have >= np + pp && np + pp <= max_np) {
    return "discovery reports " + std::to_string(have) + " usable slots (" +
           format_hosts(now_hosts) + "), the job runs on " + std::to_string(np);
  }
  return "";
}

}  // namespace etr::launcher
