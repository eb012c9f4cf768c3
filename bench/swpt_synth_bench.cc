// Benchmark of the trace synthesizer (record/swpt): instructions per second walked over a real
// ELF executable and encoded to Intel PT. Target: >= 20 M instructions/s on one core.
#include <benchmark/benchmark.h>

#include <string>

#include "record/swpt/synthesizer.h"

namespace ptkit::swpt {
namespace {

void BM_WalkAndEncode(benchmark::State& state, const char* program, bool keep_truth, bool bts) {
  std::string path =
      program[0] == '/' ? program : std::string(PTKIT_SWPT_PROGRAM_DIR) + "/" + program;
  auto synth = Synthesizer::Create(path);
  if (!synth.ok()) {
    state.SkipWithError(synth.status().ToString().c_str());
    return;
  }
  SynthOptions options;
  options.max_insns = 4'000'000;
  if (program[0] == '/') options.entry = "*";  // A system binary: stripped, no main symbol.
  options.keep_truth = keep_truth;
  options.bts = bts;
  uint64_t insns = 0, bytes = 0;
  for (auto _ : state) {
    options.seed++;
    auto r = synth->Walk(options);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    insns += r->insns;
    bytes += r->pt.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(insns));
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["pt_bytes_per_insn"] = static_cast<double>(bytes) / static_cast<double>(insns);
}
BENCHMARK_CAPTURE(BM_WalkAndEncode, interp_O2_pie, "interp_O2_pie", false, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_WalkAndEncode, sorts_O0_nopie, "sorts_O0_nopie", false, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_WalkAndEncode, sorts_O2_pie_truth, "sorts_O2_pie", true, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_WalkAndEncode, sorts_O2_pie_bts, "sorts_O2_pie", false, true)
    ->Unit(benchmark::kMillisecond);
// A large stripped C++ binary (9 MB): denser traces (many PLT exits and indirect branches).
BENCHMARK_CAPTURE(BM_WalkAndEncode, usr_bin_cmake, "/usr/bin/cmake", false, false)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptkit::swpt

BENCHMARK_MAIN();
