// Building a ProgramImage from many mappings of one library (issue 12 item 7: every MMAP2 of a
// file re-sorted all the symbols so far, O(M^2 S log(M S)) for M mappings of S symbols; 400
// mappings of libc took 98 s). Now each mapping appends its symbols and the first lookup sorts
// them once: O(M S log(M S)). The figure to watch: time per mapping as M grows. What still
// grows with M is libipt's: pt_iscache_add_file looks for an equal section among all of them
// (linear), and refuses a 65,536th ("overflow"), so M stays below 10^5 here.
#include <unistd.h>

#include <cstdint>
#include <string>

#include "benchmark/benchmark.h"
#include "decoder/image.h"

namespace ptkit::decoder {
namespace {

// Args: the library (0: libdl, 6 dynamic symbols; 1: libz, ~100), mappings.
void BM_MappingsOfOneLibrary(benchmark::State& state) {
  const std::string path =
      state.range(0) == 0 ? "/lib/x86_64-linux-gnu/libdl.so.2" : "/lib/x86_64-linux-gnu/libz.so.1";
  if (access(path.c_str(), R_OK) != 0) {
    state.SkipWithError((path + " is not here").c_str());
    return;
  }
  const int64_t mappings = state.range(1);
  uint64_t symbols = 0;
  for (auto _ : state) {
    auto image = ProgramImage::Create();
    if (!image.ok()) {
      state.SkipWithError("ProgramImage::Create failed");
      return;
    }
    for (int64_t i = 0; i < mappings; ++i) {
      const uint64_t base = 0x10000000000 + static_cast<uint64_t>(i) * 0x100000;
      if (absl::Status s = (*image)->AddFileMapping(path, base, 0x20000, 0); !s.ok()) {
        state.SkipWithError(std::string(s.message()).c_str());
        return;
      }
    }
    benchmark::DoNotOptimize((*image)->SymbolAt(0x10000000000 + 0x1000));
    symbols = (*image)->symbols().size();
  }
  state.counters["symbols"] = static_cast<double>(symbols);
  state.counters["s_per_mapping"] = benchmark::Counter(
      static_cast<double>(mappings),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_MappingsOfOneLibrary)
    ->Args({0, 1000})
    ->Args({0, 10000})
    ->Args({0, 30000})
    ->Args({1, 1000})
    ->Args({1, 10000})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptkit::decoder

BENCHMARK_MAIN();
