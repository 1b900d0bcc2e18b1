// printable (runtime/error_text.h): control bytes in an error message are escaped, the
// rest (printable ASCII, newlines, tabs, UTF-8) is kept byte for byte.
#include "runtime/error_text.h"

#include <gtest/gtest.h>

#include <string>

namespace etr {
namespace {

TEST(ErrorText, ControlBytesAreEscapedAndTheRestKept) {
  EXPECT_EQ(printable("plain text, 'quoted' = 3"), "plain text, 'quoted' = 3");
  EXPECT_EQ(printable(std::string("bo\x7fgus")), "bo\\x7fgus");
  EXPECT_EQ(printable(std::string("\x1b[31mred")), "\\x1b[31mred");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("line one\n\tline two\r"), "line one\n\tline two\\x0d");
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 as is
}

}  // namespace
}  // namespace etr
