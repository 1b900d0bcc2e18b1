// Tracer: a timeline of one rank in the Chrome Trace Event Format, merged over the job
// into one file with a process per rank (docs/design.md, "Execution of one optimizer step",
// step 4; CONTRIBUTING.md, style 12). The file opens in Perfetto (ui.perfetto.dev) and
// chrome://tracing.
//
//   Tracer trace(origin);                          // enabled; origin after a barrier
//   { auto s = trace.scope(TraceTrack::kCompute, "backward h.3", "backward"); ... }
//   trace.complete(TraceTrack::kComm, "allreduce bucket 2", "comm", t0, t1);
//   trace.write_merged(world.group(), "trace.json");   // collective; rank 0 writes
//
// Each rank is a process ("pid" = rank) with one thread per TraceTrack ("tid"): compute
// (forward/backward per layer, optimizer), communication (each bucket while its
// progress engine ran it), data (batch loading) and wait (the compute thread blocked on
// communication). Times are microseconds since the origin; with an origin taken just
// after a barrier on every rank, the ranks' tracks line up to the barrier's skew.
//
// A default-constructed Tracer is disabled: every call returns at once, so code can
// trace unconditionally. Recording is thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace etr {

class Group;

enum class TraceTrack : int { kCompute = 0, kComm = 1, kData = 2, kWait = 3 };

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;

  Tracer() = default;  // disabled
  explicit Tracer(Clock::time_point origin)
      : enabled_(true), recording_(true), origin_(origin) {}
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return enabled_; }
  // Enables a default-constructed tracer with `origin` (call before any recording).
  void enable(Clock::time_point origin) {
    origin_ = origin;
    enabled_ = true;
    set_recording(true);
  }
  // Pauses (false) or resumes recording; an enabled tracer still writes what it has.
  void set_recording(bool on) { recording_.store(on && enabled_, std::memory_order_relaxed); }
  bool recording() const { return recording_.load(std::memory_order_relaxed); }

  // A complete event ("ph": "X") from begin to end. `category` is static text; `args`
  // a JSON object's text ("{\"bytes\": 1024}") or empty.
  void complete(TraceTrack track, std::string name, const char* category,
                Clock::time_point begin, Clock::time_point end, std::string args = {});

  // Records a complete event from construction to destruction.
  class Scope {
   public:
    Scope(Tracer* tracer, TraceTrack track, std::string name, const char* category);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Tracer* tracer_;  // null when disabled
    TraceTrack track_;
    std::string name_;
    const char* category_;
    Clock::time_point begin_;
  };
  Scope scope(TraceTrack track, std::string name, const char* category) {
    return Scope(recording() ? this : nullptr, track, std::move(name), category);
  }

  size_t event_count() const;
  // This rank's events, metadata first, as comma-separated JSON objects with "pid" =
  // `pid` (no brackets, so that ranks' texts concatenate into one array).
  std::string events_json(int pid, const std::string& process_name) const;
  // Collective over `group` (every member must call it, enabled or not: a disabled
  // tracer contributes nothing). Rank 0 writes {"traceEvents": [...]} to `path` with
  // each rank's events as process "rank r"; throws IoError there when it cannot.
  void write_merged(const Group& group, const std::string& path) const;

 private:
  struct Event {
    double ts_us;
    double dur_us;
    TraceTrack track;
    const char* category;
    std::string name;
    std::string args;
  };

  bool enabled_ = false;
  std::atomic<bool> recording_{false};
  Clock::time_point origin_{};
  mutable std::mutex mutex_;
  std::vector<Event> events_;
};

}  // namespace etr
