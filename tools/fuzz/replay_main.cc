// A main() for a libFuzzer target built without libFuzzer: feeds each file
// named on the command line to LLVMFuzzerTestOneInput once, so a target's
// seed corpus (and every crash found before) is a regression test of the
// ordinary suite. A crash or a sanitizer report fails the test; the target
// itself returns 0 for every input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_FILE...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // A copy of exactly the input's size, so ASan sees reads past its end.
    std::vector<uint8_t> input(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(input.empty() ? nullptr : input.data(), input.size());
    std::fprintf(stderr, "ok %s (%zu bytes)\n", argv[i], input.size());
  }
  return 0;
}
