// Table: fixed-width text tables in the style of nccl-tests, printed row by row so that a
// long benchmark shows its results as they come.
//
//   Table t;
//   t.add_column("size", 12).add_column("time(us)", 10, "etr").add_column(...);
//   std::fputs(t.header().c_str(), stdout);   // "#"-prefixed group line + column line
//   std::fputs(t.row({"4096", "1.23", ...}).c_str(), stdout);
//
// Columns are right-aligned; a column's group (e.g. "etr", "MPI") is printed centred over
// the run of adjacent columns that share it.
#pragma once

#include <string>
#include <vector>

namespace etr::bench {

class Table {
 public:
  Table& add_column(std::string title, int width, std::string group = "");

  // The header lines, each ending in '\n'; the group line only when some column has one.
  std::string header() const;
  // One row; `cells` has one entry per column. Throws etr::Error when the count differs.
  std::string row(const std::vector<std::string>& cells) const;
  size_t columns() const { return columns_.size(); }

 private:
  struct Column {
    std::string title;
    int width;
    std::string group;
  };
  std::vector<Column> columns_;
};

// printf-style formatting into a std::string of any length: cell("%.2f", x), or a whole
// line of text.
std::string cell(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace etr::bench
