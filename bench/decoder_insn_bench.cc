// `ptdecode insn` to /dev/null (issue 16: >= 30 M instructions/s per thread), plain and with
// --disasm, plus the other per-instruction forms, over
// ../shared/testdata/libxdc-experiments/{Unzip,foo}, each through the fast decoder (the block
// graph) and through libipt (pt_insn_* for insn and branches, pt_blk_* for calls and folded).
#include <sys/resource.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "decoder/decode.h"
#include "decoder/raw_input.h"
#include "decoder/sinks.h"
#include "libxdc_traces.h"

namespace ptkit::decoder {
namespace {

using Factory =
    std::function<std::unique_ptr<Sink>(const ProgramImage&, std::FILE*, const OutputOptions&)>;

void Run(benchmark::State& state, const char* name, BlockDecoderImpl impl, const Factory& make,
         bool json, bool disasm) {
  auto input = LoadLibxdcTrace(name);
  if (!input) return state.SkipWithError("trace absent");
  SetBlockDecoderImpl(impl);
  std::FILE* null = std::fopen("/dev/null", "w");
  OutputOptions options;
  options.json = json;
  options.disasm = disasm;
  uint64_t insns = 0;
  for (auto _ : state) {
    auto sink = make(*input->image, null, options);
    auto totals = DecodeTrace(input->trace.bytes(), input->config, *input->image, *sink);
    insns += totals->instructions;
  }
  if (std::fclose(null) != 0) state.SkipWithError("fclose /dev/null");
  SetBlockDecoderImpl(BlockDecoderImpl::kFast);
  state.counters["insn/s"] =
      benchmark::Counter(static_cast<double>(insns), benchmark::Counter::kIsRate);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  state.counters["maxrss_KiB"] = static_cast<double>(ru.ru_maxrss);
}

void BM_InsnCount(benchmark::State& state, const char* name, BlockDecoderImpl impl) {
  Run(
      state, name, impl,
      [](const ProgramImage&, std::FILE*, const OutputOptions&) {
        return std::make_unique<CountSink>(DecoderKind::kInsn);
      },
      false, false);
}
void BM_Insn(benchmark::State& state, const char* name, BlockDecoderImpl impl) {
  Run(state, name, impl, MakeInsnSink, false, false);
}
void BM_InsnDisasm(benchmark::State& state, const char* name, BlockDecoderImpl impl) {
  Run(state, name, impl, MakeInsnSink, false, true);
}
void BM_InsnJson(benchmark::State& state, const char* name, BlockDecoderImpl impl) {
  Run(state, name, impl, MakeInsnSink, true, false);
}
void BM_Branches(benchmark::State& state, const char* name, BlockDecoderImpl impl) {
  Run(state, name, impl, MakeBranchesSink, false, false);
}
void BM_Calls(benchmark::State& state, const char* name, BlockDecoderImpl impl) {
  Run(state, name, impl, MakeCallsSink, false, false);
}
void BM_Folded(benchmark::State& state, const char* name, BlockDecoderImpl impl) {
  Run(state, name, impl, MakeFoldedSink, false, false);
}

constexpr BlockDecoderImpl kFast = BlockDecoderImpl::kFast;
constexpr BlockDecoderImpl kLibipt = BlockDecoderImpl::kLibipt;
#define PTKIT_BENCH_TRACES(fn)                                                          \
  BENCHMARK_CAPTURE(fn, Unzip_fast, "Unzip", kFast)->Unit(benchmark::kMillisecond);     \
  BENCHMARK_CAPTURE(fn, Unzip_libipt, "Unzip", kLibipt)->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(fn, foo_fast, "foo", kFast)->Unit(benchmark::kMillisecond);         \
  BENCHMARK_CAPTURE(fn, foo_libipt, "foo", kLibipt)->Unit(benchmark::kMillisecond)

PTKIT_BENCH_TRACES(BM_InsnCount);
PTKIT_BENCH_TRACES(BM_Insn);
PTKIT_BENCH_TRACES(BM_InsnDisasm);
PTKIT_BENCH_TRACES(BM_InsnJson);
PTKIT_BENCH_TRACES(BM_Branches);
PTKIT_BENCH_TRACES(BM_Calls);
PTKIT_BENCH_TRACES(BM_Folded);

}  // namespace
}  // namespace ptkit::decoder

BENCHMARK_MAIN();
