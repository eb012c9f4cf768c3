// Building the sideband timeline from hostile record mixes (issue 12 item 7). MMAP2 and FORK
// records alternate between two pids, so each FORK makes the other pid a new child holding
// every mapping so far: copying the parent's mappings at each FORK was O(N M) time and memory
// (N = M = 2000: 50 s and 695 MB to decode). The address spaces are now shared persistent
// trees: O(R log R) for R records. The figures to watch: time per record and stored mappings
// and tree nodes per record as R grows (10^3 to 10^5).
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "ptkit/perf_records.h"
#include "ptkit/sideband.h"

namespace ptkit {
namespace {

const perf::SampleIdLayout kLayout{
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER, true};

perf::SampleId Id(uint32_t pid, uint64_t time) {
  perf::SampleId s;
  s.has_tid = s.has_time = s.has_cpu = true;
  s.pid = s.tid = pid;
  s.time = time;
  return s;
}

// `records` records: MMAP2 of a new file range by one pid, then FORK of the other pid from it.
// With `overlap`, every MMAP2 also cuts the one before it in two.
std::vector<uint8_t> AlternatingForks(int64_t records, bool overlap) {
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < records / 2; ++i) {
    const uint32_t pid = i % 2 == 0 ? 100 : 200, other = 300 - pid;
    const uint64_t t = 2 * static_cast<uint64_t>(i);
    perf::Mmap2 m;
    m.pid = m.tid = pid;
    m.addr = 0x10000000 + static_cast<uint64_t>(i) * (overlap ? 0x800 : 0x1000);
    m.len = 0x1000;
    m.filename = "/lib/l" + std::to_string(i);
    m.prot = 5;
    m.sample_id = Id(pid, t + 1);
    std::vector<uint8_t> r = perf::EncodeMmap2(m, kLayout);
    out.insert(out.end(), r.begin(), r.end());
    perf::Task k;
    k.pid = k.tid = other;
    k.ppid = k.ptid = pid;
    k.time = t + 2;
    k.sample_id = Id(other, t + 2);
    r = perf::EncodeTask(k, kLayout);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

// Args: records, overlap (0/1).
void BM_AlternatingForks(benchmark::State& state) {
  const std::vector<uint8_t> records = AlternatingForks(state.range(0), state.range(1) != 0);
  size_t mappings = 0, nodes = 0, live = 0;
  for (auto _ : state) {
    SidebandBuilder b(kLayout);
    b.Add(0, records);
    Sideband sb = b.Build();
    live = sb.MappingsDuring(100).size();
    mappings = sb.stored_mappings();
    nodes = sb.stored_nodes();
    benchmark::DoNotOptimize(live);
  }
  const double n = static_cast<double>(state.range(0));
  state.counters["mappings_per_record"] = static_cast<double>(mappings) / n;
  state.counters["nodes_per_record"] = static_cast<double>(nodes) / n;
  state.counters["pid100_mappings"] = static_cast<double>(live);
  state.counters["s_per_record"] = benchmark::Counter(
      n, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AlternatingForks)
    ->Args({1000, 0})
    ->Args({4000, 0})
    ->Args({10000, 0})
    ->Args({100000, 0})
    ->Args({100000, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptkit

BENCHMARK_MAIN();
