// How Open MPI's traffic travels for a launch: one decision, used by etr-run and (through
// etr-run --mpirun-flags, mpirun_flags.h) by etr-mpirun.
//
//   every host is this machine -> shared memory between the ranks (btl self,vader), and
//       Open MPI's own TCP (its out-of-band channel) on loopback only (docs/machine_notes.md);
//   hosts on other machines   -> shared memory within a host, TCP between hosts
//       (btl self,vader,tcp, two TCP connections per peer pair: a ring's two directions
//       then do not share one), on one network: --iface (etr-run), else ETR_MPI_IFACE,
//       else the subnet of the interface the kernel routes to the first remote host
//       through (a UDP socket connected to it: no packet is sent).
//
// A host is this machine when it is localhost, a 127.x.y.z or ::1 address, this host's
// name, one of the addresses of its interfaces (getifaddrs), or a name resolving to one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace etr::launcher {

// The environment variable that names the network (both tools; etr-run's --iface wins).
inline constexpr const char* kIfaceEnv = "ETR_MPI_IFACE";

// One address of one of this machine's interfaces.
struct InterfaceAddress {
  std::string interface;  // e.g. "eth0"
  std::string address;    // numeric, e.g. "198.18.0.1" or "fd00::2"
  int prefix = 0;         // bits of the netmask
  std::string subnet;     // the network it is on, in CIDR form, e.g. "198.18.0.0/24"
};

// Every IPv4 and IPv6 address of this machine's interfaces (loopback included).
std::vector<InterfaceAddress> interface_addresses();

// The numeric addresses `host` stands for: itself when it is an address, else what
// getaddrinfo returns, in its order. Throws ConfigError naming the host when it does not
// resolve.
std::vector<std::string> resolve_host(const std::string& host);

// True for names of this machine that need no lookup: localhost, 127.x.y.z, ::1, this
// host's name (or its first labels).
bool names_this_machine(const std::string& host);

// True when the numeric `address` is one of this machine's (any 127.x.y.z and ::1 too).
bool is_local_address(const std::string& address);

// True when `host` resolves to one of this machine's addresses (false when it does not
// resolve at all).
bool resolves_to_this_machine(const std::string& host);

// The address of this machine's interface that the kernel sends packets to the numeric
// `address` from, and that interface's subnet. Throws ConfigError when there is no route.
InterfaceAddress route_to(const std::string& address);

// Checks an interface setting (`origin` names where it came from, e.g. "--iface"): comma-
// separated networks in CIDR form (198.18.0.0/24, fd00::/64) or interface names (eth0),
// at least one of them on this machine (mpirun's own traffic leaves through it). Throws
// ConfigError saying what is wrong.
void check_iface(const std::string& value, const std::string& origin);

// The decision for one launch.
struct MpiNetwork {
  bool local = true;   // every host is this machine
  int machines = 1;    // machines the hosts span (hosts resolving to one address count once)
  std::string iface;   // the TCP network when !local: btl_tcp_if_include, oob_tcp_if_include
  std::string origin;  // where `iface` came from: "--iface", kIfaceEnv, "default"
  std::string route_target;  // the remote address the default was routed to
  std::string rsh_agent;     // plm_rsh_agent when !local ("": mpirun's own, ssh)

  // mpirun's arguments: "--mca NAME VALUE" triples. Across machines mpirun starts every
  // remote daemon itself through rsh_agent (no tree spawn: a daemon's end is seen where
  // it was started, launch_shim.h).
  std::vector<std::string> flags() const;
  // One line for the log, e.g. "hosts span 2 machines: shared memory within a host, TCP
  // between them on 198.18.0.0/24 (default route to 198.18.0.2; --iface to change)";
  // `knob` is how a user changes the network with the tool that prints it.
  std::string describe(std::string_view knob) const;
};

// The decision for a launch on `hosts` (their names as given); `iface_flag` is etr-run's
// --iface ("" when not given). Throws ConfigError for a host that does not resolve, a
// malformed or foreign interface setting, or a remote host without a route.
MpiNetwork choose_network(const std::vector<std::string>& hosts, const std::string& iface_flag);

// The default network for remote hosts at `remote` (numeric addresses): the subnet of the
// local interface `via` routes through, and "ADDRESS/32" (or /128) for each remote address
// outside it (a host behind a router: Open MPI keeps the interfaces an entry contains, on
// every host).
std::string default_iface(const InterfaceAddress& via, const std::vector<std::string>& remote);

// `flags` ("--mca NAME VALUE" triples) without the parameters that `user_args` (more of
// mpirun's arguments) set themselves with --mca/-mca/--gmca/-gmca: mpirun refuses a
// parameter given twice, and the user's choice wins.
std::vector<std::string> without_user_mca(const std::vector<std::string>& flags,
                                          const std::vector<std::string>& user_args);

}  // namespace etr::launcher
