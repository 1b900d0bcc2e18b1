// sentencepiece_api(): loads libetr_sentencepiece.so (sentencepiece_backend.h) once, with
// RTLD_DEEPBIND: installed beside the program (PREFIX/lib beside PREFIX/bin), else from
// the build tree, else from the dynamic linker's search path.
#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "examples/data/sentencepiece_backend.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

using NewModel = std::unique_ptr<SentencePieceModel> (*)();
using Train = std::string (*)(const std::unordered_map<std::string, std::string>&, std::string_view,
                              uint32_t, std::string*);

// The library installed beside the program (PREFIX/bin/../lib: an installed etr-train
// takes its own, never a build tree's of another version), then the build tree's, then
// the dynamic linker's search path. `loaded` is the one opened.
void* open_shim(std::string& tried, std::string& loaded) {
  const int mode = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string beside =
      ec ? std::string()
         : (exe.parent_path().parent_path() / "lib" / ETR_SENTENCEPIECE_SHIM_NAME).string();
  for (const std::string& path :
       {beside, std::string(ETR_SENTENCEPIECE_SHIM), std::string(ETR_SENTENCEPIECE_SHIM_NAME)}) {
    if (path.empty()) continue;
    if (void* h = dlopen(path.c_str(), mode)) {
      loaded = path;
      return h;
    }
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + std::string(why ? why : path);
  }
  return nullptr;
}

SentencePieceApi load() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  throw ConfigError(
      "subword tokenizers are unavailable in a sanitizer build: libsentencepiece "
      "must be loaded with RTLD_DEEPBIND, which the sanitizer runtimes refuse; "
      "use a build without ETR_SANITIZE");
#endif
  std::string tried, loaded;
  void* h = open_shim(tried, loaded);
  if (h == nullptr) {
    throw ConfigError("cannot load etr's SentencePiece library (" + tried +
                      "); subword tokenizers need libetr_sentencepiece.so and "
                      "libsentencepiece (libsentencepiece-dev)");
  }
  SentencePieceApi api;
  api.new_model = reinterpret_cast<NewModel>(dlsym(h, "etr_sentencepiece_new_model"));
  api.train = reinterpret_cast<Train>(dlsym(h, "etr_sentencepiece_train"));
  if (api.new_model == nullptr || api.train == nullptr) {
    throw ConfigError("etr's SentencePiece library " + loaded +
                      " lacks its entry points; rebuild etr");
  }
  return api;  // the library stays loaded for the life of the process
}

}  // namespace

const SentencePieceApi& sentencepiece_api() {
  static std::once_flag once;
  static SentencePieceApi api;
  std::call_once(once, [] { api = load(); });  // a throw leaves it to be tried again
  return api;
}

}  // namespace etr::data
