// etr-run inside a Slurm allocation (--launcher srun, issue 36): each launch of the job is
// a job step, `srun --mpi=pmix`, on the allocation's usable nodes; the nodes are
// discovered from Slurm itself.
//
// Why pmix: Debian 12's Open MPI 4.1 is built against the system PMIx (its pmix components
// are ext3x, isolated and flux: no s1/s2), so a rank started by srun learns its rank, size
// and peers through PMIx only; `srun --mpi=pmi2` starts ranks that abort in MPI_Init
// ("OMPI was not built with SLURM's PMI support"). Debian's Slurm 22.05 has mpi/pmix
// (pmix_v4, the same libpmix2).
//
// A step: srun --mpi=pmix --kill-on-bad-exit=1 --overlap --export=ALL --nodes=K --ntasks=NP
//         --distribution=arbitrary (SLURM_HOSTFILE: one node a rank, in etr-run's order, so
//         that rank r runs where take_slots() put it) [--srun-arg ...] JOB...
// A rank that fails ends the step (--kill-on-bad-exit), as mpirun ends a job; --overlap lets
// a step start while Slurm still counts a failed step's CPUs on a node that no longer
// answers. The step has Slurm's default node-failure handling (a node that fails ends the
// step); the allocation itself should be made with --no-kill (sbatch --no-kill), so that
// Slurm keeps it, shrunk, when a node fails.
//
// Discovery: etr-run runs itself as its discovery script (etr-run --slurm-nodes), which
// prints the allocation's usable nodes in the hostfile syntax: the job's current node list
// (scontrol show job: Slurm removes a node that it declared DOWN from a --no-kill job),
// expanded (scontrol show hostnames), without the nodes whose state (sinfo) is not one to
// run on (down, drained, failing, not responding: a '*'), each with the ranks the
// allocation gives it (SLURM_TASKS_PER_NODE, else SLURM_JOB_CPUS_PER_NODE).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/host_names.h"
#include "launcher/network.h"

namespace etr::launcher {

inline constexpr const char* kSlurmNodesFlag = "--slurm-nodes";

// Whether this process runs inside a Slurm allocation (SLURM_JOB_ID is set).
bool in_slurm_allocation();

// Checks that `srun` (a path or a program on PATH) can launch here: inside an allocation,
// and executable. Throws ConfigError with one sentence.
void check_srun_launcher(const std::string& srun);

// Slurm's compressed counts per node: "2(x3),1" -> {2, 2, 2, 1}. Throws ConfigError.
std::vector<int> parse_tasks_per_node(const std::string& text);

// Whether a node in sinfo's long state (%T: "allocated", "mixed*", "down", "drained",
// "idle~" ...) can run ranks: allocated, mixed, idle or completing, and responding (no
// '*' or other flag).
bool usable_node_state(const std::string& state);

// The value of KEY in `scontrol show ... -o` output ("KEY=VALUE" words), or "".
std::string scontrol_field(const std::string& line, const std::string& key);

// The nodes of the allocation that ranks can run on, "NODE:SLOTS" each, from the outputs of
// scontrol and sinfo: `all_nodes` and `per_node` (the allocation's nodes at its start and
// their slots), `now_nodes` (its nodes now), `sinfo` ("NODE STATE" lines).
std::vector<HostSlots> usable_allocation(const std::vector<std::string>& all_nodes,
                                         const std::vector<int>& per_node,
                                         const std::vector<std::string>& now_nodes,
                                         const std::string& sinfo);

// One step's command line and what its environment adds: SLURM_HOSTFILE (`hostfile`, which
// the caller writes: hostfile_lines()) and Open MPI's transports (`network`) as OMPI_MCA_*
// variables, except those already in etr-run's environment (the user's choice wins).
struct SrunCommand {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
};
SrunCommand srun_command(const std::string& srun, const std::vector<std::string>& srun_args,
                         const std::vector<HostSlots>& hosts, int np, const MpiNetwork& network,
                         const std::string& hostfile, const std::vector<std::string>& job);

// The SLURM_HOSTFILE of `np` ranks on `hosts`: one node a line, a node's slots in a row.
std::string hostfile_lines(const std::vector<HostSlots>& hosts, int np);

// srun's report of a node it lost ("srun: error: Node failure on h2", "srun: error: Task
// launch for StepId=5.3 failed on node h2: ..."): the node, or "".
std::string srun_lost_node_in(const std::string& line);

// etr-run --slurm-nodes: prints usable_allocation() of this allocation; 1 with one sentence
// on stderr when Slurm cannot be asked.
int run_slurm_nodes();

}  // namespace etr::launcher
