#include "checkpoint/extent_runs.h"

#include <map>

namespace etr {

void append_extent(ckpt::TensorRecord& rec, const ExtentRef& x) {
  if (rec.runs_size() > 0) {
    ckpt::ExtentRun& r = *rec.mutable_runs(rec.runs_size() - 1);
    const uint64_t n = r.more() + 1;  // extents in the run so far
    if (x.count == r.count() && x.tensor_begin == r.tensor_begin() + n * r.count()) {
      const int64_t file_step = x.file - static_cast<int64_t>(r.file());
      const int64_t offset_step = static_cast<int64_t>(x.file_offset - r.file_offset());
      if (r.more() == 0) {  // two extents make a progression
        r.set_file_step(file_step);
        r.set_offset_step(offset_step);
        r.set_more(1);
        return;
      }
      const ExtentRef next = extent_of(r, n);
      if (next.file == x.file && next.file_offset == x.file_offset) {
        r.set_more(n);
        return;
      }
    }
  }
  ckpt::ExtentRun* r = rec.add_runs();
  r->set_file(static_cast<uint32_t>(x.file));
  r->set_file_offset(x.file_offset);
  r->set_tensor_begin(x.tensor_begin);
  r->set_count(x.count);
}

uint64_t extent_count(const ckpt::TensorRecord& rec) {
  uint64_t n = 0;
  for (const ckpt::ExtentRun& r : rec.runs()) n += r.more() + 1;
  return n;
}

std::string runs_from_extents(ckpt::Manifest& m) {
  std::map<std::string, int> index;
  for (int i = 0; i < m.files_size(); ++i) index.emplace(m.files(i).name(), i);
  for (ckpt::TensorRecord& t : *m.mutable_tensors()) {
    t.clear_runs();
    for (const ckpt::Extent& e : t.extents()) {
      const auto f = index.find(e.file());
      if (f == index.end()) {
        return "tensor " + t.name() + " (" + t.state() + ") points into " + e.file() +
               ", which the manifest does not list";
      }
      if (e.count() == 0) continue;
      append_extent(t, {f->second, e.file_offset(), e.tensor_begin(), e.count()});
    }
    t.clear_extents();
  }
  return "";
}

void extents_from_runs(ckpt::Manifest& m) {
  for (ckpt::TensorRecord& t : *m.mutable_tensors()) {
    t.clear_extents();
    for_each_extent(t, [&](const ExtentRef& x) {
      ckpt::Extent* e = t.add_extents();
      e->set_file(m.files(x.file).name());
      e->set_file_offset(x.file_offset);
      e->set_tensor_begin(x.tensor_begin);
      e->set_count(x.count);
    });
    t.clear_runs();
  }
}

}  // namespace etr
