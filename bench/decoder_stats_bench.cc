// `ptdecode stats`, `folded` and `calls` (at -j1: through CanonicalBlocks) through libipt's block
// decoder and through the fast block decoder (decoder/fast_block_decoder.h; with its walk of
// canonical blocks, without it, with its own packet loop, decoder/pt_packet_loop.h, and with
// libipt's query decoder), side by side with a bare libipt block-decoder
// loop over the same trace and image (issue 16's target: stats fast >= 5x the bare loop).
// Traces: ../shared/testdata/libxdc-experiments (Unzip, foo), page dumps served through
// pt_image_set_callback, as recorded and repeated 64 times. Skips a trace that is absent.
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
#include "decoder/parallel_decode.h"
#include "decoder/raw_input.h"
#include "decoder/sinks.h"
#include "libxdc_traces.h"

namespace ptkit::decoder {
namespace {

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

// The trace repeated `copies` times (each copy starts at a PSB), decoded as one: the steady
// state, where the fast decoder's graph is built and only followed.
std::vector<uint8_t> Repeat(std::span<const uint8_t> trace, int64_t copies) {
  std::vector<uint8_t> big;
  for (int64_t i = 0; i < copies; ++i) big.insert(big.end(), trace.begin(), trace.end());
  return big;
}

// What is measured: 0 the bare libipt loop; 1-3 stats, folded, calls through ptdecode's sinks.
enum Mode { kBare, kStats, kFolded, kCalls };

// One measurement: `mode` over `name` repeated state.range(0) times, with the block decoder
// `impl`. Real time: libipt's block loop runs on a thread of its own (decode.cc).
void Run(benchmark::State& state, const char* name, Mode mode, BlockDecoderImpl impl) {
  auto input = LoadLibxdcTrace(name);
  if (!input) return state.SkipWithError("trace absent");
  const std::vector<uint8_t> trace = Repeat(input->trace.bytes(), state.range(0));
  std::FILE* null = std::fopen("/dev/null", "w");
  SetBlockDecoderImpl(impl);
  uint64_t insns = 0;
  for (auto _ : state) {
    if (mode == kBare) {
      insns += BareBlockLoop(trace, *input);
      continue;
    }
    // A fresh image each time, as a ptdecode process has (and libipt's block cache with it).
    auto fresh = LoadLibxdcTrace(name);
    OutputOptions options;
    auto sink = mode == kStats    ? MakeStatsSink(*fresh->image, null, options)
                : mode == kFolded ? MakeFoldedSink(*fresh->image, null, options)
                                  : MakeCallsSink(*fresh->image, null, options);
    const ImageLoader one_thread = []() -> absl::StatusOr<std::unique_ptr<ProgramImage>> {
      return absl::InternalError("one thread: no image to load");
    };
    insns +=
        DecodeTraceWithJobs(trace, fresh->config, *fresh->image, one_thread, *sink)->instructions;
  }
  SetBlockDecoderImpl(BlockDecoderImpl::kFast);
  if (std::fclose(null) != 0) state.SkipWithError("fclose /dev/null");
  SetCounters(state, insns);
}

// Per trace, side by side: the bare loop, then each output through libipt and through the fast
// decoder. Arg: copies of the trace (1: as recorded; 64: the steady state).
int Register() {
  struct Variant {
    const char* label;
    Mode mode;
    BlockDecoderImpl impl;
  };
  static const Variant kVariants[] = {
      {"bare_libipt_loop", kBare, BlockDecoderImpl::kLibipt},
      {"stats_libipt", kStats, BlockDecoderImpl::kLibipt},
      {"stats_fast_libipt_packets", kStats, BlockDecoderImpl::kFastLibiptPackets},
      {"stats_fast_blocks", kStats, BlockDecoderImpl::kFastNoWalk},
      {"stats_fast_no_runs", kStats, BlockDecoderImpl::kFastNoRuns},
      {"stats_fast", kStats, BlockDecoderImpl::kFast},
      {"folded_libipt", kFolded, BlockDecoderImpl::kLibipt},
      {"folded_fast_blocks", kFolded, BlockDecoderImpl::kFastNoWalk},
      {"folded_fast_no_runs", kFolded, BlockDecoderImpl::kFastNoRuns},
      {"folded_fast", kFolded, BlockDecoderImpl::kFast},
      {"calls_libipt", kCalls, BlockDecoderImpl::kLibipt},
      {"calls_fast_blocks", kCalls, BlockDecoderImpl::kFastNoWalk},
      {"calls_fast_no_runs", kCalls, BlockDecoderImpl::kFastNoRuns},
      {"calls_fast", kCalls, BlockDecoderImpl::kFast},
  };
  for (const char* trace : {"Unzip", "foo"}) {
    for (const Variant& v : kVariants) {
      benchmark::RegisterBenchmark((std::string(trace) + "/" + v.label).c_str(), Run, trace, v.mode,
                                   v.impl)
          ->Arg(1)
          ->Arg(64)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace ptkit::decoder

BENCHMARK_MAIN();
