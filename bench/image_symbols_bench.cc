// Building a ProgramImage from many mappings of one library (issue 12 item 7: every MMAP2 of a
// file re-sorted all the symbols so far; 400 mappings of libc took 98 s). Now a file's symbols
// are read once, at link-time addresses and sorted (O(S log S) for S symbols), each mapping
// places the k symbols it holds (O(log S + k)), and the first lookup sorts the N placed once
// (O(N log N)). The figure to watch: time per mapping as M grows.
//
// What still grows with M is libipt's: pt_iscache_add_file looks for an equal section among
// all of them and pt_image_add checks the new section against every one (both linear), and the
// section cache refuses a 65,536th section ("overflow"): past that, AddFileMapping fails, as a
// hostile recording's extra mappings would (decoded as missing); the counter "refused" says
// how many.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "benchmark/benchmark.h"
#include "decoder/image.h"

namespace ptkit::decoder {
namespace {

const char* LibraryPath(int64_t which) {
  switch (which) {
    case 0:
      return "/lib/x86_64-linux-gnu/libdl.so.2";  // 6 dynamic symbols
    case 1:
      return "/lib/x86_64-linux-gnu/libz.so.1";  // ~100
    default:
      return "/lib/x86_64-linux-gnu/libc.so.6";  // ~3,000
  }
}

// Args: the library (LibraryPath), mappings. Each maps the whole file at its own address.
void BM_MappingsOfOneLibrary(benchmark::State& state) {
  const std::string path = LibraryPath(state.range(0));
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    state.SkipWithError((path + " is not here").c_str());
    return;
  }
  const uint64_t len = static_cast<uint64_t>(st.st_size);
  const uint64_t stride = (len + 0xfffff) & ~uint64_t{0xfffff};
  const int64_t mappings = state.range(1);
  uint64_t symbols = 0;
  int64_t refused = 0;
  for (auto _ : state) {
    auto image = ProgramImage::Create();
    if (!image.ok()) {
      state.SkipWithError("ProgramImage::Create failed");
      return;
    }
    refused = 0;
    for (int64_t i = 0; i < mappings; ++i) {
      const uint64_t base = 0x10000000000 + static_cast<uint64_t>(i) * stride;
      if (!(*image)->AddFileMapping(path, base, len, 0).ok()) ++refused;
    }
    benchmark::DoNotOptimize((*image)->SymbolAt(0x10000000000 + 0x1000));
    symbols = (*image)->symbols().size();
  }
  state.counters["symbols"] = static_cast<double>(symbols);
  state.counters["refused"] = static_cast<double>(refused);
  state.counters["s_per_mapping"] = benchmark::Counter(
      static_cast<double>(mappings),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_MappingsOfOneLibrary)
    ->Args({0, 1000})
    ->Args({0, 10000})
    ->Args({0, 30000})
    ->Args({0, 100000})
    ->Args({1, 1000})
    ->Args({1, 10000})
    ->Args({2, 400})
    ->Args({2, 2000})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptkit::decoder

BENCHMARK_MAIN();
