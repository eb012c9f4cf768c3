// Benchmarks of the software Intel PT encoder (record/swpt): events per second into PT packets
// (libipt pt_enc_next) and into BTS records.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "record/swpt/bts_writer.h"
#include "record/swpt/pt_encoder.h"

namespace ptkit::swpt {
namespace {

// A branch mix like the synthesizer's: mostly conditional branches, calls with matching
// returns, some indirect jumps.
std::vector<Event> MakeEvents(size_t n) {
  std::mt19937_64 rng(1);
  std::vector<Event> events = {Event::Enable(0x401000)};
  std::vector<uint64_t> calls;
  uint64_t ip = 0x401000;
  while (events.size() < n) {
    uint64_t r = rng() % 100;
    if (r < 70) {
      events.push_back(Event::Cond(ip, 2, rng() % 2, ip + 0x20));
    } else if (r < 82 && calls.size() < 200) {
      events.push_back(Event::Simple(EventKind::kDirectCall, ip, 0x402000 + (rng() % 0x8000), 5));
      calls.push_back(ip + 5);
    } else if (r < 94 && !calls.empty()) {
      events.push_back(Event::Simple(EventKind::kReturn, ip, calls.back()));
      calls.pop_back();
    } else {
      events.push_back(Event::Simple(EventKind::kIndirectJump, ip, 0x401000 + (rng() % 0x10000)));
    }
    ip = events.back().target;
  }
  return events;
}

void BM_PtEncode(benchmark::State& state) {
  const std::vector<Event> events = MakeEvents(1 << 20);
  PtEncoderOptions options;
  options.ret_compression = state.range(0) != 0;
  options.max_tnt_bits = static_cast<uint8_t>(state.range(1));
  uint64_t bytes = 0;
  for (auto _ : state) {
    auto enc = PtEncoder::Create(options);
    for (const Event& e : events) {
      if (!enc->Add(e).ok()) state.SkipWithError("Add failed");
    }
    if (!enc->Finish().ok()) state.SkipWithError("Finish failed");
    bytes += enc->TakeBytes().size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * events.size()));
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["bytes_per_event"] =
      static_cast<double>(bytes) / static_cast<double>(state.iterations() * events.size());
}
BENCHMARK(BM_PtEncode)
    ->ArgNames({"retcomp", "tnt_bits"})
    ->Args({1, 6})
    ->Args({0, 6})
    ->Args({1, 47})
    ->Unit(benchmark::kMillisecond);

void BM_BtsWrite(benchmark::State& state) {
  const std::vector<Event> events = MakeEvents(1 << 20);
  for (auto _ : state) {
    BtsWriter writer;
    for (const Event& e : events) writer.Add(e);
    benchmark::DoNotOptimize(writer.bytes().data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * events.size()));
}
BENCHMARK(BM_BtsWrite)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptkit::swpt

BENCHMARK_MAIN();
