#include "runtime/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "runtime/crc32c.h"
#include "runtime/error.h"
#include "runtime/tensorboard_event.pb.h"

namespace etr {
namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Opens a new event file in `dir`: the first free <n> for this second, host and pid (a
// second writer in the same process, or a pid reused within a second, takes the next).
int create_event_file(const std::filesystem::path& dir, std::filesystem::path& path) {
  const int64_t seconds = static_cast<int64_t>(wall_time());
  const std::string host = host_name();
  for (int n = 0;; ++n) {
    path = dir / event_file_name(seconds, host, static_cast<long>(getpid()), n);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST || n >= 1000) {
      throw IoError("cannot create the TensorBoard event file " + path.string() + ": " +
                    std::strerror(errno));
    }
  }
}

}  // namespace

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc32c(crc32c(std::string_view(out.data(), 8))), 4);
  out.append(data);
  put_le(out, mask_crc32c(crc32c(data)), 4);
  return out;
}

std::string event_file_name(int64_t unix_seconds, const std::string& host, long pid, int n) {
  char head[64];
  std::snprintf(head, sizeof head, "events.out.tfevents.%010lld.",
                static_cast<long long>(unix_seconds));
  return head + host + "." + std::to_string(pid) + "." + std::to_string(n);
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw IoError("cannot create the TensorBoard directory " + dir.string() + ": " + ec.message());
  }
  fd_ = create_event_file(dir, path_);
  tensorboard::Event e;
  e.set_wall_time(wall_time());
  e.set_file_version("brain.Event:2");
  add(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    flush();
  } catch (const std::exception&) {
    // (a destructor does not throw: what could not be written is lost)
  }
  ::close(fd_);
}

void TensorBoardWriter::add(const tensorboard::Event& event) {
  pending_ += tfrecord(event.SerializeAsString());
}

void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  add_scalars(step, {{tag, value}});
}

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, double>>& values) {
  if (values.empty()) return;
  tensorboard::Event e;
  e.set_wall_time(wall_time());
  e.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  add(e);
}

void TensorBoardWriter::add_text(const std::string& tag, int64_t step, const std::string& text) {
  tensorboard::Event e;
  e.set_wall_time(wall_time());
  e.set_step(step);
  tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  // TensorBoard's text summary: the plugin's content is its TextPluginData, version 0,
  // which serializes to nothing.
  tensorboard::SummaryMetadata* m = v->mutable_metadata();
  m->mutable_plugin_data()->set_plugin_name("text");
  m->set_data_class(tensorboard::DATA_CLASS_TENSOR);
  tensorboard::TensorProto* t = v->mutable_tensor();
  t->set_dtype(tensorboard::DT_STRING);
  t->mutable_tensor_shape();  // rank 0: no dims
  t->add_string_val(text);
  add(e);
}

void TensorBoardWriter::flush() {
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "nothing written";
      pending_.erase(0, done);
      throw IoError("cannot write the TensorBoard event file " + path_.string() + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  pending_.clear();
}

}  // namespace etr
