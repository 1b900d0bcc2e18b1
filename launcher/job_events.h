// etr-run's side of the run directory the job writes (runtime/elastic.h): the events file
// ("<unix ms> <event> key=value ..." lines, appended by the job's ranks and by etr-run)
// and the progress file (the last completed step).
//
// etr-run's own lines: "launch n=N np=P hosts=H reason=R [halvings=K]", "exit status=S
// last_step=T", "resize-request np=P", "exclude host=H", and "oom-kill rank=R kills=K
// halvings=N relaunch=0|1" when the kernel's OOM killer ended a rank (oom_watch.h; rank
// -1: none named; halvings: ETR_RUN_MEMORY_HALVINGS of the relaunch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace etr::launcher {

// One parsed line of <run dir>/events.
struct Event {
  int64_t ms = 0;
  std::string name;
  std::map<std::string, std::string> fields;
};

// nullopt for a line without "<ms> <name>" (a partial line, garbage).
std::optional<Event> parse_event(const std::string& line);

// Follows the events file as the job appends to it.
class EventTail {
 public:
  explicit EventTail(std::filesystem::path path) : path_(std::move(path)) {}
  // The complete lines appended since the last call.
  std::vector<Event> read_new();

 private:
  std::filesystem::path path_;
  size_t offset_ = 0;
};

// The step in <run dir>/progress, or -1 when there is none yet.
int64_t read_progress(const std::filesystem::path& path);

}  // namespace etr::launcher
