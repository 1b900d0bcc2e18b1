#include "launcher/job_events.h"

#include <fstream>
#include <iterator>
#include <sstream>

namespace etr::launcher {

std::optional<Event> parse_event(const std::string& line) {
  std::istringstream in(line);
  Event e;
  if (!(in >> e.ms >> e.name)) return std::nullopt;
  std::string kv;
  while (in >> kv) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) e.fields[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return e;
}

std::vector<Event> EventTail::read_new() {
  std::vector<Event> out;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return out;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t start = 0;
  for (size_t nl; (nl = chunk.find('\n', start)) != std::string::npos; start = nl + 1) {
    if (auto e = parse_event(chunk.substr(start, nl - start))) out.push_back(*e);
  }
  offset_ += start;
  return out;
}

int64_t read_progress(const std::filesystem::path& path) {
  std::ifstream in(path);
  long long step = -1;
  if (in >> step) return step;
  return -1;
}

}  // namespace etr::launcher
