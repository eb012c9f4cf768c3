// `ptdecode stats` throughput vs a bare libipt block-decoder loop over the same trace and image
// (target: stats >= 0.9x bare). Traces: ../shared/testdata/libxdc-experiments (Unzip, foo),
// page dumps served through pt_image_set_callback. Skips a trace that is absent.
#include <intel-pt.h>
#include <sys/resource.h>

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "decoder/decode.h"
#include "decoder/ipt_handles.h"
#include "decoder/raw_input.h"
#include "decoder/sinks.h"

namespace ptkit::decoder {
namespace {

std::unique_ptr<RawInput> LoadTrace(const std::string& name) {
  std::string dir =
      std::string(PTKIT_SOURCE_DIR) + "/../shared/testdata/libxdc-experiments/" + name;
  RawInputSpec spec;
  spec.pt_path = dir + "/trace";
  spec.page_dumps.push_back(ParsePageDumpSpec(dir));
  auto input = LoadRawInput(spec);
  if (!input.ok()) return nullptr;
  return std::make_unique<RawInput>(std::move(*input));
}

void SetCounters(benchmark::State& state, uint64_t insns) {
  state.counters["insn/s"] =
      benchmark::Counter(static_cast<double>(insns), benchmark::Counter::kIsRate);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  state.counters["maxrss_KiB"] = static_cast<double>(ru.ru_maxrss);
}

// The reference: what a hand-written libipt program does (ptxed --quiet --stat).
uint64_t BareBlockLoop(std::span<const uint8_t> trace, const RawInput& input) {
  auto pt = MakePtConfig(trace, input.config);
  uint64_t insns = 0;
  {
    BlockDecoderPtr dec(pt_blk_alloc_decoder(&*pt));
    pt_blk_set_image(dec.get(), input.image->image());
    for (;;) {
      int status = pt_blk_sync_forward(dec.get());
      if (status < 0) break;
      for (;;) {
        while (status & pts_event_pending) {
          pt_event event;
          status = pt_blk_event(dec.get(), &event, sizeof(event));
          if (status < 0) break;
        }
        if (status < 0 || (status & pts_eos)) break;
        pt_block block;
        status = pt_blk_next(dec.get(), &block, sizeof(block));
        insns += block.ninsn;
        if (status < 0) break;
      }
      if (status == -pte_eos || (status >= 0 && (status & pts_eos))) break;
    }
  }
  return insns;
}

void BM_BareBlockLoop(benchmark::State& state, const char* name) {
  auto input = LoadTrace(name);
  if (!input) return state.SkipWithError("trace absent");
  uint64_t insns = 0;
  for (auto _ : state) insns += BareBlockLoop(input->trace.bytes(), *input);
  SetCounters(state, insns);
}

void BM_Stats(benchmark::State& state, const char* name) {
  auto input = LoadTrace(name);
  if (!input) return state.SkipWithError("trace absent");
  std::FILE* null = std::fopen("/dev/null", "w");
  uint64_t insns = 0;
  for (auto _ : state) {
    auto sink = MakeStatsSink(*input->image, null, {});
    auto totals = DecodeTrace(input->trace.bytes(), input->config, *input->image, *sink);
    insns += totals->instructions;
  }
  std::fclose(null);
  SetCounters(state, insns);
}

void BM_Count(benchmark::State& state, const char* name) {
  auto input = LoadTrace(name);
  if (!input) return state.SkipWithError("trace absent");
  uint64_t insns = 0;
  for (auto _ : state) {
    CountSink sink;
    auto totals = DecodeTrace(input->trace.bytes(), input->config, *input->image, sink);
    insns += totals->instructions;
  }
  SetCounters(state, insns);
}

// The floor for stats: counting with blocks that also end at calls (stats needs those).
class CountOnCallSink : public CountSink {
 public:
  bool end_block_on_call() const override { return true; }
};
void BM_CountEndOnCall(benchmark::State& state, const char* name) {
  auto input = LoadTrace(name);
  if (!input) return state.SkipWithError("trace absent");
  uint64_t insns = 0;
  for (auto _ : state) {
    CountOnCallSink sink;
    auto totals = DecodeTrace(input->trace.bytes(), input->config, *input->image, sink);
    insns += totals->instructions;
  }
  SetCounters(state, insns);
}

// A longer trace: the real trace repeated (each copy starts at a PSB), decoded as one.
void BM_Repeated(benchmark::State& state, const char* name, int mode) {
  auto input = LoadTrace(name);
  if (!input) return state.SkipWithError("trace absent");
  std::vector<uint8_t> big;
  for (int i = 0; i < state.range(0); ++i) {
    big.insert(big.end(), input->trace.bytes().begin(), input->trace.bytes().end());
  }
  std::FILE* null = std::fopen("/dev/null", "w");
  uint64_t insns = 0;
  for (auto _ : state) {
    if (mode == 2) {
      insns += BareBlockLoop(big, *input);
    } else if (mode == 1) {
      auto sink = MakeStatsSink(*input->image, null, {});
      insns += DecodeTrace(big, input->config, *input->image, *sink)->instructions;
    } else {
      CountSink sink;
      insns += DecodeTrace(big, input->config, *input->image, sink)->instructions;
    }
  }
  std::fclose(null);
  SetCounters(state, insns);
}
void BM_RepeatedCount(benchmark::State& state, const char* name) { BM_Repeated(state, name, 0); }
void BM_RepeatedStats(benchmark::State& state, const char* name) { BM_Repeated(state, name, true); }
void BM_RepeatedBare(benchmark::State& state, const char* name) { BM_Repeated(state, name, 2); }
BENCHMARK_CAPTURE(BM_RepeatedBare, foo, "foo")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RepeatedCount, foo, "foo")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RepeatedStats, foo, "foo")->Arg(64)->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_CountEndOnCall, Unzip, "Unzip")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CountEndOnCall, foo, "foo")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BareBlockLoop, Unzip, "Unzip")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Count, Unzip, "Unzip")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Stats, Unzip, "Unzip")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BareBlockLoop, foo, "foo")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Count, foo, "foo")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Stats, foo, "foo")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptkit::decoder

BENCHMARK_MAIN();
