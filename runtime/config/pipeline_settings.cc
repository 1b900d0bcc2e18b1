// The pipeline's settings (runtime/config/pipeline_settings.h).
#include "runtime/config/pipeline_settings.h"

#include <cstdint>
#include <string>

#include "runtime/error.h"

namespace etr {
namespace {

void require(bool ok, const std::string& sentence) {
  if (!ok) throw ConfigError(sentence);
}

}  // namespace

std::span<const std::string_view> pipeline_schedule_names() {
  static constexpr std::string_view kNames[] = {"gpipe", "1f1b", "interleaved", "interleaved-1f1b", "zb-h1", "zb-v"};
  return kNames;
}

// The pipeline settings, checked whether or not parallel.pp turns a pipeline on: a value
// wrong in every layout is refused at once (the layout-dependent checks, such as the
// partition's count against pp x chunks, are pipeline_setup's). The schedule names are
// parallel/pipeline_schedule.h's (pipeline_schedule_test holds the two lists equal).
void validate_pipeline_settings(const TrainConfig& config) {
  const config::ParallelConfig& p = config.parallel();
  const std::string& s = p.pp_schedule();
  bool known = false;
  for (std::string_view name : pipeline_schedule_names()) known = known || s == name;
  require(known, "parallel.pp_schedule = \"" + s +
                     "\" is not a pipeline schedule; choose gpipe, 1f1b, interleaved (or "
                     "interleaved-1f1b), zb-h1 or zb-v.");
  const int64_t layers = static_cast<int64_t>(config.model().n_layer()) + 2;
  const int v = p.pp_virtual_stages();
  require(v <= layers, "parallel.pp_virtual_stages = " + std::to_string(v) + " asks for more virtual stages (model chunks "
                           "per rank) than the model's " + std::to_string(layers) +
                           " layers (the embedding, model.n_layer blocks, the head); each chunk holds a layer "
                           "at least.");
  const bool interleaved = s == "interleaved" || s == "interleaved-1f1b";
  require(!(s == "zb-v" && v != 0 && v != 2),
          "parallel.pp_virtual_stages = " + std::to_string(v) + " but the zb-v schedule runs 2 chunks per stage; set 0 or 2.");
  require(!(interleaved && v == 1), "parallel.pp_virtual_stages = 1 but the interleaved schedule needs 2 or more "
                                    "chunks per stage; set 0 (2) or more, or use 1f1b.");
  require(interleaved || s == "zb-v" || v <= 1,
          "parallel.pp_virtual_stages = " + std::to_string(v) + " needs parallel.pp_schedule = interleaved; " + s +
              " runs 1 chunk per stage.");
  const std::string& part = p.pp_partition();
  if (part == "params" || part == "measure") return;
  bool list = !part.empty();
  int64_t sum = 0;
  for (size_t start = 0; list;) {
    const size_t comma = part.find(',', start);
    std::string entry = part.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!entry.empty() && (entry.back() == ' ' || entry.back() == '\t')) entry.pop_back();
    while (!entry.empty() && (entry.front() == ' ' || entry.front() == '\t')) entry.erase(0, 1);
    list = !entry.empty() && entry.size() <= 9 && entry.find_first_not_of("0123456789") == std::string::npos &&
           std::stoll(entry) >= 1;
    if (list) sum += std::stoll(entry);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  require(list, "parallel.pp_partition = \"" + part +
                    "\" is not params, measure, nor a list of layers per stage such as \"3,2,2\" (whole numbers "
                    "from 1, separated by commas).");
  require(sum == layers, "parallel.pp_partition = \"" + part + "\" covers " + std::to_string(sum) +
                             " layers but the model has " + std::to_string(layers) +
                             " (the embedding, model.n_layer blocks, the head).");
}

}  // namespace etr
