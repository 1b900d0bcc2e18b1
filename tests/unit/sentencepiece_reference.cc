// The unit tests' independent reference for subword tokenizers: SentencePiece's own
// processor, called directly in a process of its own (it links libsentencepiece and no
// etr library, so its protobuf-lite clashes with nothing; sentencepiece_backend.h).
//
//   sentencepiece_reference MODEL TEXT   prints the piece count, then the ids of the
//                                        whole TEXT file from one Encode call
#include <sentencepiece_processor.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL TEXT\n", argv[0]);
    return 2;
  }
  sentencepiece::SentencePieceProcessor sp;
  if (const auto s = sp.Load(argv[1]); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::ifstream in(argv[2], std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int> ids;
  if (const auto s = sp.Encode(text, &ids); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%d\n", sp.GetPieceSize());
  for (int id : ids) std::printf("%d ", id);
  std::printf("\n");
  return 0;
}
