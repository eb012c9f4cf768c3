// libFuzzer's hooks for the structure-aware trace.pt mutator (container_mutator.h), linked into
// the fuzzers whose input is a trace.pt (container_reader_fuzz, decode_fuzz).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "container_mutator.h"

namespace {

// PTKIT_FUZZ_MUTATOR=bytes: libFuzzer's own mutations only.
bool Plain() {
  static const bool plain = [] {
    const char* v = std::getenv("PTKIT_FUZZ_MUTATOR");
    return v != nullptr && std::strcmp(v, "bytes") == 0;
  }();
  return plain;
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  if (Plain()) return LLVMFuzzerMutate(data, size, max_size);
  return ptkit::fuzz::MutateContainer(data, size, max_size, seed, LLVMFuzzerMutate);
}

extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t* data1, size_t size1,
                                            const uint8_t* data2, size_t size2, uint8_t* out,
                                            size_t max_out_size, unsigned int seed) {
  if (Plain()) return 0;
  return ptkit::fuzz::CrossOverContainers(std::span<const uint8_t>(data1, size1),
                                          std::span<const uint8_t>(data2, size2), out, max_out_size,
                                          seed);
}
