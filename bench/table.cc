#include "bench/table.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "runtime/check.h"

namespace etr::bench {

namespace {

constexpr int kGap = 2;             // spaces before every column
constexpr const char* kLead = "#";  // header lines start with this, as in nccl-tests

std::string pad_left(const std::string& s, int width) {
  int n = std::max(0, width - static_cast<int>(s.size()));
  return std::string(static_cast<size_t>(n), ' ') + s;
}

}  // namespace

Table& Table::add_column(std::string title, int width, std::string group) {
  width = std::max(width, static_cast<int>(title.size()));
  columns_.push_back({std::move(title), width, std::move(group)});
  return *this;
}

std::string Table::header() const {
  std::string groups = kLead, titles = kLead;
  bool any_group = false;
  // The first column's gap is shortened by the lead character so rows and headers align.
  int lead = static_cast<int>(std::string(kLead).size());
  for (size_t i = 0; i < columns_.size();) {
    size_t j = i;
    int span = 0;
    while (j < columns_.size() && columns_[j].group == columns_[i].group) {
      span += kGap + columns_[j].width - (j == 0 ? lead : 0);
      titles += pad_left(columns_[j].title, kGap + columns_[j].width - (j == 0 ? lead : 0));
      ++j;
    }
    const std::string& g = columns_[i].group;
    if (!g.empty()) any_group = true;
    // Centre the group name over its columns, marked with dashes: "---- etr ----".
    std::string label = g.empty() ? "" : " " + g + " ";
    int fill = span - kGap - static_cast<int>(label.size());
    if (g.empty() || fill < 2) {
      groups += pad_left(label, span);
    } else {
      groups += std::string(kGap, ' ') + std::string(static_cast<size_t>(fill / 2), '-') + label +
                std::string(static_cast<size_t>(fill - fill / 2), '-');
    }
    i = j;
  }
  while (!groups.empty() && groups.back() == ' ') groups.pop_back();
  return (any_group ? groups + "\n" : "") + titles + "\n";
}

std::string Table::row(const std::vector<std::string>& cells) const {
  ETR_CHECK_EQ(cells.size(), columns_.size()) << "a table row needs one cell per column";
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) line += pad_left(cells[i], kGap + columns_[i].width);
  return line + "\n";
}

std::string cell(const char* format, ...) {
  char buf[128];
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  std::string out = buf;
  if (n >= static_cast<int>(sizeof buf)) {  // longer than buf: format again at full length
    out.resize(static_cast<size_t>(n));
    std::vsnprintf(out.data(), out.size() + 1, format, again);
  }
  va_end(again);
  return out;
}

}  // namespace etr::bench
