// Tests of the checks etr-run applies to host lists before mpirun sees them
// (launcher/host_names.h, issue 13 case 7): host names (RFC 1123 names, IPv4 and
// IPv6 addresses), slot bounds, and refusals quoted escaped. The expected names and
// messages are written out by hand; the damaged inputs are random bytes from a fixed seed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <random>
#include <string>

#include "launcher/host_names.h"
#include "launcher/hosts.h"
#include "runtime/error.h"
#include "unit/launcher_test_util.h"

namespace etr {
namespace {

using namespace launcher_test;  // NOLINT: the helpers of these tests

// True when every byte of `s` is printable ASCII (what a terminal shows as it is).
bool all_printable(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f) return false;
  }
  return true;
}

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen() & 0xff);
  return s;
}

TEST(Printable, EscapesWhatIsNotPrintableAscii) {
  EXPECT_EQ(launcher::printable("node-1"), "node-1");
  EXPECT_EQ(launcher::printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(launcher::printable("\x1b[31mred\t\xff\\"), "\\x1b[31mred\\x09\\xff\\\\");
  EXPECT_EQ(launcher::printable(std::string(100, 'x'), 10),
            std::string(10, 'x') + "... (100 bytes)");
}

TEST(HostNameProblem, AcceptsNamesAndAddresses) {
  for (const char* ok :
       {"localhost", "node1", "n", "node-1.example.com", "A1.b2", "10.0.0.1", "127.0.0.1", "::1",
        "fe80::1", "2001:db8::8a2e:370:7334", "3com.example", "x.123"}) {
    EXPECT_EQ(launcher::host_name_problem(ok), "") << ok;
  }
  EXPECT_EQ(launcher::host_name_problem(std::string(63, 'a') + "." + std::string(63, 'b')), "");
}

TEST(HostNameProblem, RefusesWhatIsNeitherWithAReason) {
  EXPECT_THAT(launcher::host_name_problem(""), HasSubstr("no host name"));
  EXPECT_THAT(launcher::host_name_problem("local host"),
              HasSubstr("' ' is not a letter, digit, '-' or '.'"));
  EXPECT_THAT(launcher::host_name_problem("under_score"), HasSubstr("'_'"));
  EXPECT_THAT(launcher::host_name_problem("a..b"), HasSubstr("empty label"));
  EXPECT_THAT(launcher::host_name_problem(".a"), HasSubstr("empty label"));
  EXPECT_THAT(launcher::host_name_problem("a."), HasSubstr("empty label"));
  EXPECT_THAT(launcher::host_name_problem("-a"), HasSubstr("'-'"));
  EXPECT_THAT(launcher::host_name_problem("a-.b"), HasSubstr("'-'"));
  EXPECT_THAT(launcher::host_name_problem(std::string(64, 'a')), HasSubstr("63"));
  std::string long_name;
  for (int i = 0; i < 5; ++i) long_name += std::string(60, 'a') + ".";
  EXPECT_THAT(launcher::host_name_problem(long_name + "a"), HasSubstr("253"));
  EXPECT_THAT(launcher::host_name_problem("999.1.1.1"), HasSubstr("not an IPv4 address"));
  EXPECT_THAT(launcher::host_name_problem("127.1"), HasSubstr("not an IPv4 address"));
  EXPECT_THAT(launcher::host_name_problem("fe80:::1"), HasSubstr("':'"));
  EXPECT_THAT(launcher::host_name_problem("h\xc3\xa9"), HasSubstr("'\\xc3'"));
}

TEST(ParseHostList, HostWithASpaceIsRefused) {
  const std::string msg = config_error([] { launcher::parse_host_list("local host:2"); });
  EXPECT_EQ(msg,
            "--hosts item 'local host:2': 'local host' is not a host name: ' ' is not a letter, "
            "digit, '-' or '.'; write HOST or HOST:SLOTS, e.g. node1:2");
}

TEST(ParseHostList, SlotsAreAWholeNumberFrom1To4096) {
  EXPECT_EQ(launcher::parse_host_list("a:1,b:4096"), (HostList{{"a", 1}, {"b", 4096}}));
  for (const char* bad : {"a:0", "a:4097", "a:2147483648", "a:99999999999999999999", "a:+2", "a: 2",
                          "a:0x10", "a:"}) {
    EXPECT_THAT(config_error([&] { launcher::parse_host_list(bad); }),
                HasSubstr("is not a whole number from 1 to 4096"))
        << bad;
  }
}

TEST(ParseHostList, RepeatedHostsAndAllHostsAreBounded) {
  EXPECT_EQ(launcher::parse_host_list("a:4000,a:96"), (HostList{{"a", 4096}}));
  EXPECT_THAT(config_error([] { launcher::parse_host_list("a:4000,a:97"); }),
              HasSubstr("host 'a' is given more than 4096 slots in all"));
  std::string many;
  for (int i = 0; i < 17; ++i) many.append("h").append(std::to_string(i)).append(":4096,");
  EXPECT_THAT(config_error([&] { launcher::parse_host_list(many); }),
              HasSubstr("more than 65536 slots in all"));
}

TEST(ParseHostList, Ipv6AddressesBareOrInBrackets) {
  EXPECT_EQ(launcher::parse_host_list("::1"), (HostList{{"::1", 1}}));
  EXPECT_EQ(launcher::parse_host_list("[::1]:2,[fe80::1],10.0.0.1:3"),
            (HostList{{"::1", 2}, {"fe80::1", 1}, {"10.0.0.1", 3}}));
  EXPECT_THAT(config_error([] { launcher::parse_host_list("[::1"); }), HasSubstr("no ']'"));
  EXPECT_THAT(config_error([] { launcher::parse_host_list("[::1]2"); }), HasSubstr("':SLOTS'"));
  EXPECT_THAT(config_error([] { launcher::parse_host_list("[node1]:2"); }),
              HasSubstr("not an IPv6 address"));
  // format_hosts writes what parse_host_list reads back.
  const HostList hosts = {{"::1", 2}, {"node1", 1}, {"10.0.0.1", 3}};
  EXPECT_EQ(launcher::format_hosts(hosts), "[::1]:2,node1:1,10.0.0.1:3");
  EXPECT_EQ(launcher::parse_host_list(launcher::format_hosts(hosts)), hosts);
}

TEST(ParseHostList, RandomBytesAreRefusedEscaped) {
  for (unsigned seed = 1; seed <= 50; ++seed) {
    const std::string text = random_bytes(40, seed);
    try {
      const auto hosts = launcher::parse_host_list(text);
      for (const auto& h : hosts) EXPECT_EQ(launcher::host_name_problem(h.host), "");
    } catch (const ConfigError& e) {
      EXPECT_TRUE(all_printable(e.what())) << launcher::printable(e.what(), 1000);
      EXPECT_THAT(e.what(), StartsWith("--hosts item '"));
    }
  }
}

TEST(ParseHostLines, RandomBytesNameTheSourceAndLineEscaped) {
  for (unsigned seed = 1; seed <= 50; ++seed) {
    const std::string text = "good-host:2\n" + random_bytes(3000, seed);
    const std::string msg =
        config_error([&] { launcher::parse_host_lines(text, "hostfile /tmp/h"); });
    EXPECT_THAT(msg, StartsWith("hostfile /tmp/h, line "));
    EXPECT_TRUE(all_printable(msg)) << launcher::printable(msg, 1000);
    EXPECT_LT(msg.size(), 600u);  // a long line is cut, not printed whole
  }
}

TEST(ParseHostLines, HostsAreCheckedInEveryForm) {
  EXPECT_EQ(launcher::parse_host_lines("n1 slots=2\n10.0.0.2:3\n[::1] slots=4\n::1\n", "f"),
            (HostList{{"n1", 2}, {"10.0.0.2", 3}, {"::1", 5}}));
  EXPECT_THAT(config_error([] { launcher::parse_host_lines("ok\nbad_host slots=2\n", "f"); }),
              StartsWith("f, line 2 ('bad_host slots=2'): 'bad_host' is not a host name"));
  EXPECT_THAT(config_error([] { launcher::parse_host_lines("h:2 slots=3\n", "f"); }),
              StartsWith("f, line 1 ('h:2 slots=3'): 'h:2' is not a host name"));
  EXPECT_THAT(config_error([] { launcher::parse_host_lines("h slots=0\n", "f"); }),
              HasSubstr("from 1 to 4096"));
  EXPECT_THAT(config_error([] { launcher::parse_host_lines("h slots=5000\n", "f"); }),
              HasSubstr("from 1 to 4096"));
}

TEST(HostSource, DescribeEscapesTheValue) {
  EXPECT_EQ(HostSource(HostSource::Kind::kScript, "/x/\x1b[2Jd.sh").describe(),
            "discovery script /x/\\x1b[2Jd.sh");
  EXPECT_EQ(HostSource(HostSource::Kind::kFile, "h\nf").describe(), "hostfile h\\x0af");
}

TEST(HostSourceFile, RandomBytesNameTheFileAndLine) {
  TempDir dir;
  const std::string path = dir.write("hosts", random_bytes(4096, 7));
  const std::string msg =
      config_error([&] { HostSource(HostSource::Kind::kFile, path).discover(); });
  EXPECT_THAT(msg, StartsWith("hostfile " + path + ", line "));
  EXPECT_TRUE(all_printable(msg)) << launcher::printable(msg, 1000);
}

TEST(HostSourceFile, DevicesAndFifosAreRefusedNotReadForever) {
  // /dev/zero never ends; a FIFO without a writer blocks the open.
  EXPECT_THAT(io_error([&] { HostSource(HostSource::Kind::kFile, "/dev/zero").discover(); }),
              HasSubstr("the hostfile /dev/zero is not a regular file"));
  TempDir dir;
  const std::string fifo = (dir.path() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_THAT(io_error([&] { HostSource(HostSource::Kind::kFile, fifo).discover(); }),
              HasSubstr("is not a regular file"));
}

TEST(HostSourceFile, LargerThanOneMiBIsRefused) {
  TempDir dir;
  const std::string path = dir.write("hosts", std::string((1 << 20) + 1, '\n'));
  EXPECT_THAT(io_error([&] { HostSource(HostSource::Kind::kFile, path).discover(); }),
              HasSubstr("larger than 1 MiB"));
  // Exactly 1 MiB of blank lines is still a (host-less) hostfile.
  dir.write("hosts", std::string(1 << 20, '\n'));
  EXPECT_TRUE(HostSource(HostSource::Kind::kFile, path).discover().empty());
}

}  // namespace
}  // namespace etr
