#include "launcher/mpirun_flags.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "launcher/host_names.h"
#include "launcher/network.h"
#include "runtime/error_text.h"

namespace etr::launcher {
namespace {

// The hosts of a hostfile in Open MPI's syntax: the first word of each line ("HOST
// slots=N max_slots=M ..."; '#' starts a comment). The rest is mpirun's to check.
std::vector<std::string> hostfile_hosts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot read the hostfile '" + printable(path, 200) + "'");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line.substr(0, line.find('#')));
    std::string host;
    if (words >> host) out.push_back(host);
  }
  return out;
}

}  // namespace

std::vector<std::string> hosts_in_mpirun_args(const std::vector<std::string>& args) {
  std::vector<std::string> hosts;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--host" || a == "-host" || a == "-H") {
      for (const auto& h : parse_host_list(args[i + 1])) hosts.push_back(h.host);
    } else if (a == "--hostfile" || a == "-hostfile" || a == "--machinefile" ||
               a == "-machinefile" || a == "--default-hostfile" || a == "-default-hostfile") {
      for (const auto& h : hostfile_hosts(args[i + 1])) hosts.push_back(h);
    } else if (a == "--") {
      break;
    }
  }
  return hosts;
}

std::vector<std::string> mpirun_flags(const std::vector<std::string>& args) {
  const MpiNetwork network = choose_network(hosts_in_mpirun_args(args), "");
  return without_user_mca(network.flags(), args);
}

int run_mpirun_flags(const std::vector<std::string>& args) {
  try {
    for (const auto& w : mpirun_flags(args)) std::printf("%s\n", w.c_str());
    return 0;
  } catch (const Error& e) {
    print_error("etr-mpirun", e.what());
    return 1;
  }
}

}  // namespace etr::launcher
