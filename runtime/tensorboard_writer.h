// TensorBoardWriter: scalars and text for TensorBoard, written as its event files.
//
// An event file (TensorBoard's naming: events.out.tfevents.<unix s>.<host>.<pid>.<n>) is
// a sequence of TFRecords; each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   the data | uint32 masked CRC-32C of the data        (runtime/crc32c.h)
// and each record's data is one serialized Event (runtime/tensorboard_event.proto). The
// first Event of a file has file_version "brain.Event:2"; the others carry a Summary:
// a scalar is a Value with simple_value; a text is a Value holding a rank-0 DT_STRING
// tensor, with metadata naming the "text" plugin (TensorBoard's text summary).
//
// Every writer makes a new file: TensorBoard reads all the files of a directory as one
// run, so the launches of one job (etr-run relaunches) writing to one directory show as
// one run. Records are kept in memory until flush(): a crash loses what was not flushed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace etr {

namespace tensorboard {
class Event;
}

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it holding the file_version
  // event. IoError when either cannot be created.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  // Flushes (errors ignored) and closes the file.
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // A point of the chart `tag` ("train/loss") at `step`. TensorBoard keeps float32.
  void add_scalar(const std::string& tag, int64_t step, double value);
  // Points of several charts at `step`, as one event.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // A text (markdown) at `step`, shown by TensorBoard's text dashboard under `tag`.
  void add_text(const std::string& tag, int64_t step, const std::string& text);
  // Writes the records added since the last flush. IoError when they cannot be written.
  void flush();

 private:
  void add(const tensorboard::Event& event);

  std::filesystem::path path_;
  int fd_ = -1;
  std::string pending_;  // framed records not yet written
};

// `data` framed as one TFRecord.
std::string tfrecord(std::string_view data);

// "events.out.tfevents.<unix_seconds>.<host>.<pid>.<n>" (seconds zero-padded to 10
// digits, as TensorBoard's own writer does).
std::string event_file_name(int64_t unix_seconds, const std::string& host, long pid, int n);

}  // namespace etr
