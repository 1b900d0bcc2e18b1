// manifest_edit: crafts checkpoint manifests for tests of manifests that pass their
// checksum but make no sense (checkpoint/manifest.h, check_manifest_sense).
//
//   manifest_edit print CKPT > m.txt        the manifest as protobuf text (not checked)
//   manifest_edit write CKPT m.txt          replaces it by m.txt with a valid checksum
//
// Exit 0, 1 on a file that cannot be read or parsed, 2 on bad usage.
#include <google/protobuf/text_format.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

#include "checkpoint/extent_runs.h"
#include "checkpoint/manifest.h"

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "print" && argc == 3) || (mode == "write" && argc == 4))) {
    std::fprintf(stderr, "usage: manifest_edit print CKPT | manifest_edit write CKPT TEXT_FILE\n");
    return 2;
  }
  try {
    const std::string dir = argv[2];
    const std::string path = dir + "/" + etr::ckpt_format::kManifestName;
    if (mode == "print") {
      etr::ckpt::ManifestFile envelope;
      etr::ckpt::Manifest m;
      if (!envelope.ParseFromString(read_text(path)) || !m.ParseFromString(envelope.manifest())) {
        throw std::runtime_error(path + " does not parse");
      }
      std::string text;
      google::protobuf::TextFormat::PrintToString(m, &text);
      std::fputs(text.c_str(), stdout);
      return 0;
    }
    etr::ckpt::Manifest m;
    if (!google::protobuf::TextFormat::ParseFromString(read_text(argv[3]), &m)) {
      throw std::runtime_error(std::string(argv[3]) + " is not a manifest in protobuf text");
    }
    // A version 1 manifest's records (as `print` shows them) become the runs version 2
    // writes (a record naming an unlisted file cannot).
    bool records = false;
    for (const auto& t : m.tensors()) records = records || t.extents_size() > 0;
    if (records && !etr::runs_from_extents(m).empty()) {
      throw std::runtime_error(std::string(argv[3]) + " has an extent in an unlisted file");
    }
    etr::write_manifest(dir, m);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "manifest_edit: %s\n", e.what());
    return 1;
  }
}
