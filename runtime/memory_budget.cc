#include "runtime/memory_budget.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/env.h"

namespace etr {
namespace {

// v1 writes "no limit" as the largest page count in bytes (9223372036854771712 with 4 KiB
// pages, a little less with larger ones): anything from 2^62 up is no limit.
constexpr uint64_t kNoLimit = uint64_t{1} << 62;

std::string read_text(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Reads a small file (a cgroup value, statm) into `buf`, NUL-terminated, without
// allocating; its length, or -1 when it cannot be read.
ssize_t read_small(const std::string& path, char* buf, size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n + 1 < size) {
    const ssize_t got = ::read(fd, buf + n, size - 1 - n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    n += static_cast<size_t>(got);
  }
  ::close(fd);
  buf[n] = '\0';
  return static_cast<ssize_t>(n);
}

std::optional<uint64_t> parse_u64(const char* begin, const char* end) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || p == begin) return std::nullopt;
  return v;
}

// A limit file's value: nullopt for "max", a huge v1 value or an unreadable file.
std::optional<size_t> read_limit(const std::string& path) {
  char buf[64];
  const ssize_t n = read_small(path, buf, sizeof buf);
  if (n <= 0 || std::strncmp(buf, "max", 3) == 0) return std::nullopt;
  const auto v = parse_u64(buf, buf + n);
  if (!v || *v >= kNoLimit) return std::nullopt;
  return static_cast<size_t>(*v);
}

// N of the "oom_kill N" line of memory.events or memory.oom_control (0 when there is none).
uint64_t read_oom_kills(const std::string& path) {
  char buf[1024];
  const ssize_t n = read_small(path, buf, sizeof buf);
  constexpr std::string_view kKey = "oom_kill ";
  for (ssize_t at = 0; at < n;) {
    const char* line = buf + at;
    const char* nl = static_cast<const char*>(std::memchr(line, '\n', static_cast<size_t>(n - at)));
    const char* end = nl ? nl : buf + n;
    if (static_cast<size_t>(end - line) > kKey.size() &&
        std::string_view(line, kKey.size()) == kKey) {
      return parse_u64(line + kKey.size(), end).value_or(0);
    }
    at = end - buf + 1;
  }
  return 0;
}

bool file_exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t begin = 0;;) {
    const size_t end = std::min(s.find(sep, begin), s.size());
    out.push_back(s.substr(begin, end - begin));
    if (end == s.size()) return out;
    begin = end + 1;
  }
}

// The cgroup path of the v1 hierarchy holding `controller` (v2: controller "" and the
// "0::" line) in /proc/self/cgroup's text.
std::optional<std::string> cgroup_path(std::string_view proc_self_cgroup,
                                       std::string_view controller) {
  for (std::string_view line : split(proc_self_cgroup, '\n')) {
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view path = line.substr(c2 + 1);
    if (controller.empty()) {
      if (line.substr(0, c1) == "0" && controllers.empty()) return std::string(path);
      continue;
    }
    for (std::string_view c : split(controllers, ',')) {
      if (c == controller) return std::string(path);
    }
  }
  return std::nullopt;
}

// The directory of cgroup `path` under a mount of the hierarchy (v2: fstype "cgroup2";
// v1: "cgroup" with the memory option), and that mount's directory; nullopt when no
// such mount holds the path.
std::optional<std::pair<std::string, std::string>> cgroup_dir(std::string_view mountinfo,
                                                              const std::string& path,
                                                              int version) {
  for (std::string_view line : split(mountinfo, '\n')) {
    const std::vector<std::string_view> f = split(line, ' ');
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 10 || dash + 3 >= f.size()) continue;
    const std::string_view fstype = f[dash + 1];
    bool match = version == 2 && fstype == "cgroup2";
    if (version == 1 && fstype == "cgroup") {
      for (std::string_view opt : split(f[dash + 3], ',')) match = match || opt == "memory";
    }
    if (!match) continue;
    std::string root = unescape(f[3]);
    const std::string mount = unescape(f[4]);
    if (root == "/") root.clear();
    // The mount shows the hierarchy from `root` down: the path must lie under it.
    if (path.compare(0, root.size(), root) != 0 ||
        (path.size() > root.size() && path[root.size()] != '/')) {
      continue;
    }
    std::string rel = path.substr(root.size());
    while (!rel.empty() && rel.back() == '/') rel.pop_back();
    return std::make_pair(mount + rel, mount);
  }
  return std::nullopt;
}

// `dir` and its ancestors up to `top` (both under `root`) that have the file `name`.
std::vector<std::string> files_up_to(const std::string& root, std::string dir,
                                     const std::string& top, const char* name) {
  std::vector<std::string> out;
  for (;;) {
    const std::string file = root + dir + "/" + name;
    if (file_exists(file)) out.push_back(file);
    if (dir.size() <= top.size()) return out;
    dir.erase(dir.rfind('/'));
  }
}

}  // namespace

std::optional<CgroupPaths> find_memory_cgroup(std::string_view proc_self_cgroup,
                                              std::string_view mountinfo, const std::string& root) {
  if (const auto path = cgroup_path(proc_self_cgroup, "")) {
    if (const auto dir = cgroup_dir(mountinfo, *path, 2);
        dir && file_exists(root + dir->first + "/memory.max")) {
      std::vector<std::string> limits = files_up_to(root, dir->first, dir->second, "memory.max");
      for (std::string& f : files_up_to(root, dir->first, dir->second, "memory.high")) {
        limits.push_back(std::move(f));
      }
      return CgroupPaths{2, root + dir->first, std::move(limits), root + dir->first + "/memory.current",
                         root + dir->first + "/memory.events"};
    }
  }
  if (const auto path = cgroup_path(proc_self_cgroup, "memory")) {
    if (const auto dir = cgroup_dir(mountinfo, *path, 1);
        dir && file_exists(root + dir->first + "/memory.usage_in_bytes")) {
      std::vector<std::string> limits =
          files_up_to(root, dir->first, dir->second, "memory.limit_in_bytes");
      for (std::string& f : files_up_to(root, dir->first, dir->second, "memory.soft_limit_in_bytes")) {
        limits.push_back(std::move(f));
      }
      return CgroupPaths{1, root + dir->first, std::move(limits),
                         root + dir->first + "/memory.usage_in_bytes",
                         root + dir->first + "/memory.oom_control"};
    }
  }
  return std::nullopt;
}

std::optional<CgroupPaths> find_memory_cgroup() {
  return find_memory_cgroup(read_text("/proc/self/cgroup"), read_text("/proc/self/mountinfo"));
}

CgroupMemory read_cgroup_memory(const CgroupPaths& paths) {
  CgroupMemory m;
  m.version = paths.version;
  m.dir = paths.dir;
  for (const std::string& file : paths.limit_files) {
    if (const auto limit = read_limit(file); limit && (!m.limit || *limit < *m.limit))
      m.limit = limit;
  }
  char buf[64];
  if (const ssize_t n = read_small(paths.usage_file, buf, sizeof buf); n > 0) {
    m.usage = static_cast<size_t>(parse_u64(buf, buf + n).value_or(0));
  }
  m.oom_kills = read_oom_kills(paths.oom_file);
  return m;
}

std::optional<CgroupMemory> read_cgroup_memory(std::string_view proc_self_cgroup,
                                               std::string_view mountinfo,
                                               const std::string& root) {
  const auto paths = find_memory_cgroup(proc_self_cgroup, mountinfo, root);
  if (!paths) return std::nullopt;
  return read_cgroup_memory(*paths);
}

std::optional<CgroupMemory> read_cgroup_memory() {
  const auto paths = find_memory_cgroup();
  if (!paths) return std::nullopt;
  return read_cgroup_memory(*paths);
}

size_t resident_bytes(const std::string& statm) {
  char buf[256];
  const ssize_t n = read_small(statm, buf, sizeof buf);
  if (n <= 0) return 0;
  const char* space = static_cast<const char*>(std::memchr(buf, ' ', static_cast<size_t>(n)));
  if (!space) return 0;
  const auto pages = parse_u64(space + 1, buf + n);
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return pages ? static_cast<size_t>(*pages) * page : 0;
}

size_t peak_resident_bytes(const std::string& status) {
  char buf[4096];
  const ssize_t n = read_small(status, buf, sizeof buf - 1);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* at = std::strstr(buf, "VmHWM:");
  if (!at) return 0;
  at += 6;
  while (*at == ' ' || *at == '\t') ++at;
  const char* end = at;
  while (*end >= '0' && *end <= '9') ++end;
  const auto kib = parse_u64(at, end);
  return kib ? static_cast<size_t>(*kib) * 1024 : 0;
}

bool reset_peak_resident() {
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

// A positive byte count of setting `name`, or nullopt for "".
std::optional<size_t> budget_setting(const std::string& value, const char* name) {
  if (value.empty()) return std::nullopt;
  size_t bytes = 0;
  try {
    bytes = parse_bytes(value);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(name) + ": " + e.what());
  }
  if (bytes == 0) {
    throw ConfigError(std::string(name) +
                      " is 0; give a size such as 8GiB, or leave it empty for none");
  }
  return bytes;
}

namespace {

MemoryBudget::Inputs machine_inputs(const std::string& config_value, int local_ranks) {
  MemoryBudget::Inputs in;
  in.config = config_value;
  if (const char* env = env_value("ETR_HOST_MEMORY_BUDGET")) in.environment = env;
  in.cgroup = find_memory_cgroup();
  in.available = host_available_memory();
  in.local_ranks = local_ranks;
  return in;
}

}  // namespace

MemoryBudget::MemoryBudget(const std::string& config_value, int local_ranks)
    : MemoryBudget(machine_inputs(config_value, local_ranks)) {}

MemoryBudget::MemoryBudget(Inputs inputs) : inputs_(std::move(inputs)) {
  if (inputs_.local_ranks < 1) {
    throw ConfigError("the ranks sharing this node's memory must be at least 1, not " +
                      std::to_string(inputs_.local_ranks));
  }
  config_bytes_ = budget_setting(inputs_.config, "runtime.memory_budget");
  env_bytes_ = budget_setting(inputs_.environment, "ETR_HOST_MEMORY_BUDGET");
}

MemoryBudget::Reading MemoryBudget::read(size_t allocator_reserved) const {
  Reading r;
  bool any = false;
  auto consider = [&](size_t bytes, Source source) {
    if (any && bytes >= r.bytes) return false;
    r.bytes = bytes;
    r.source = source;
    any = true;
    return true;
  };
  if (config_bytes_) consider(*config_bytes_, Source::kConfig);
  if (env_bytes_) consider(*env_bytes_, Source::kEnvironment);
  if (inputs_.cgroup) {
    std::optional<size_t> limit;
    for (const std::string& file : inputs_.cgroup->limit_files) {
      if (const auto l = read_limit(file); l && (!limit || *l < *limit)) {
        limit = l;
        r.cgroup_file = file.substr(file.rfind('/') + 1);
      }
    }
    if (limit) {
      r.cgroup_version = inputs_.cgroup->version;
      r.cgroup_limit = *limit;
      r.local_ranks = inputs_.local_ranks;
      const size_t resident = resident_bytes(inputs_.statm);
      r.outside = resident > allocator_reserved ? resident - allocator_reserved : 0;
      const size_t share = *limit / static_cast<size_t>(inputs_.local_ranks);
      consider(share > r.outside ? share - r.outside : 0, Source::kCgroup);
    }
  }
  if (!any) consider(inputs_.available, Source::kAvailable);
  return r;
}

std::string MemoryBudget::Reading::describe() const {
  switch (source) {
    case Source::kConfig:
      return "runtime.memory_budget " + format_bytes(static_cast<double>(bytes));
    case Source::kEnvironment:
      return "ETR_HOST_MEMORY_BUDGET " + format_bytes(static_cast<double>(bytes));
    case Source::kCgroup:
      return "cgroup v" + std::to_string(cgroup_version) + " " + cgroup_file + " " +
             format_bytes(static_cast<double>(cgroup_limit)) + " / " + std::to_string(local_ranks) +
             (local_ranks == 1 ? " rank" : " ranks") + ", less " +
             format_bytes(static_cast<double>(outside)) + " outside the allocator";
    case Source::kAvailable:
      return "the machine's available memory at start-up, " +
             format_bytes(static_cast<double>(bytes));
  }
  return "";
}

const char* to_string(MemoryBudget::Source source) {
  switch (source) {
    case MemoryBudget::Source::kConfig:
      return "config";
    case MemoryBudget::Source::kEnvironment:
      return "environment";
    case MemoryBudget::Source::kCgroup:
      return "cgroup";
    case MemoryBudget::Source::kAvailable:
      return "available";
  }
  return "?";
}

}  // namespace etr
