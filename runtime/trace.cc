#include "runtime/trace.h"

#include <mpi.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/group.h"
#include "runtime/mpi_check.h"
#include "runtime/control_ops.h"

namespace etr {
namespace {

constexpr const char* kTrackNames[] = {"compute", "communication", "data", "wait"};

double micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace

void Tracer::complete(TraceTrack track, std::string name, const char* category,
                      Clock::time_point begin, Clock::time_point end, std::string args) {
  if (!recording()) return;
  Event e{micros(begin - origin_), micros(end - begin), track, category, std::move(name),
          std::move(args)};
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(e));
}

Tracer::Scope::Scope(Tracer* tracer, TraceTrack track, std::string name, const char* category)
    : tracer_(tracer), track_(track), category_(category) {
  if (!tracer_) return;
  name_ = std::move(name);
  begin_ = Clock::now();
}

Tracer::Scope::~Scope() {
  if (tracer_) tracer_->complete(track_, std::move(name_), category_, begin_, Clock::now());
}

size_t Tracer::event_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::string Tracer::events_json(int pid, const std::string& process_name) const {
  using nlohmann::json;
  std::string out;
  auto append = [&out](const json& j) {
    if (!out.empty()) out += ",\n";
    out += j.dump();
  };
  append({{"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", process_name}}}});
  append({{"ph", "M"}, {"pid", pid}, {"name", "process_sort_index"}, {"args", {{"sort_index", pid}}}});
  for (int t = 0; t < 4; ++t) {
    append({{"ph", "M"}, {"pid", pid}, {"tid", t}, {"name", "thread_name"},
            {"args", {{"name", kTrackNames[t]}}}});
    append({{"ph", "M"}, {"pid", pid}, {"tid", t}, {"name", "thread_sort_index"},
            {"args", {{"sort_index", t}}}});
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Event& e : events_) {
    json j = {{"ph", "X"},
              {"pid", pid},
              {"tid", static_cast<int>(e.track)},
              {"name", e.name},
              {"cat", e.category},
              {"ts", e.ts_us},
              {"dur", e.dur_us}};
    if (!e.args.empty()) j["args"] = json::parse(e.args);
    append(j);
  }
  return out;
}

void Tracer::write_merged(const Group& group, const std::string& path) const {
  const int rank = group.rank();
  const std::string mine = enabled_ ? events_json(rank, "rank " + std::to_string(rank)) : "";
  const std::vector<std::string> each =
      control::gather_strings(mine, 0, group.comm(), "the trace's merge (trace)");
  if (rank != 0 || !enabled_) return;
  std::ofstream out(path, std::ios::out | std::ios::trunc | std::ios::binary);
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (const std::string& events : each) {
    if (events.empty()) continue;
    if (!first) out << ",\n";
    out << events;
    first = false;
  }
  out << "\n]}\n";
  out.flush();
  if (!out) throw IoError("cannot write the trace file " + path);
}

}  // namespace etr
