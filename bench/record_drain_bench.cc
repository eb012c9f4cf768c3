// Drain throughput: the simulated PMU writes one AUX watermark's worth of trace (a record, see
// MakeDrainData), the Drainer moves it into a ContainerWriter writing to /dev/null; 64 MiB per
// iteration. Producer and drain
// share the calling thread (run under `taskset -c 0` for the 1-core figure); the writer thread
// compresses and writes, with a helper thread when compress_threads is 2.
#include <fcntl.h>
#include <zstd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include "benchmark/benchmark.h"
#include "ptkit/container_writer.h"
#include "record/drain.h"
#include "record/drain_loop.h"
#include "record/ring.h"
#include "record/sim_pmu.h"

namespace ptkit::record {
namespace {

// Bytes with PT-like packets whose branch outcomes are random: the worst case for zstd (about
// 1.6x; real PT compresses 3-6x with zstd -1 because real branches repeat).
// `loop` repeats a 4 KiB stretch with a small perturbation every 64 bytes, as a hot loop's
// trace does (same TNT/TIP sequence each iteration, changing timing packets).
std::vector<uint8_t> PtLikeBytes(size_t n, bool loop) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(7);
  if (loop) {
    const std::vector<uint8_t> body = PtLikeBytes(4096, false);
    for (size_t i = 0; i < n; ++i) v[i] = body[i % body.size()];
    for (size_t i = 0; i < n; i += 64) v[i] = static_cast<uint8_t>(rng());
    return v;
  }
  for (size_t i = 0; i < n;) {
    const uint32_t r = rng();
    if (r % 8 == 0 && i + 7 < n) {  // TIP-like: opcode + 6 address bytes, mostly repeated
      v[i++] = 0x4d;
      for (int k = 0; k < 6; ++k) v[i++] = static_cast<uint8_t>(k < 4 ? 0x40 + k : r >> 8);
    } else {
      v[i++] = static_cast<uint8_t>(0x02 | ((r >> 4) & 0xfc));  // TNT-8-like
    }
  }
  return v;
}

// The real hardware traces in ../shared/testdata (46,240 bytes together), twice in a row, so
// that any slice up to their length is one span.
const std::vector<uint8_t>& HardwareTraces() {
  static const std::vector<uint8_t> twice = [] {
    std::vector<uint8_t> v;
    for (const char* set : {"Unzip", "foo"}) {
      std::ifstream in(std::string(PTKIT_SOURCE_DIR) + "/../shared/testdata/libxdc-experiments/" +
                           set + "/trace",
                       std::ios::binary);
      v.insert(v.end(), std::istreambuf_iterator<char>(in), {});
    }
    const size_t n = v.size();
    v.resize(2 * n);
    std::copy_n(v.begin(), n, v.begin() + static_cast<ptrdiff_t>(n));
    return v;
  }();
  return twice;
}

// The records one benchmark drains, in order (cycled), and the AUX watermark that makes the
// simulated kernel report each as one PERF_RECORD_AUX.
//   data 0: random branches (PtLikeBytes), half the 4 MiB AUX ring per record;
//   data 1: a hot loop (PtLikeBytes loop), half the ring per record;
//   data 2: real hardware PT, 32 KiB per record: consecutive slices of the testdata traces,
//           each shorter than their period, so no record holds the same bytes twice and zstd
//           sees only the repetition the real trace has (zstd -b1 -B32K: 1.05 GB/s, 5.0x).
struct DrainData {
  std::vector<std::vector<uint8_t>> records;
  uint64_t watermark = 0;
};

DrainData MakeDrainData(int64_t kind, uint64_t aux_bytes) {
  DrainData d;
  if (kind == 2) {
    const std::vector<uint8_t>& twice = HardwareTraces();
    const size_t period = twice.size() / 2;
    constexpr size_t kRecord = 32 << 10;
    if (period < kRecord) return d;
    for (size_t i = 0, off = 0; i < 64; ++i, off = (off + kRecord) % period) {
      d.records.emplace_back(twice.begin() + static_cast<ptrdiff_t>(off),
                             twice.begin() + static_cast<ptrdiff_t>(off + kRecord));
    }
    d.watermark = kRecord;
    return d;
  }
  d.records.push_back(PtLikeBytes(aux_bytes / 2, kind == 1));
  d.watermark = aux_bytes / 2;
  return d;
}

void BM_DrainToContainer(benchmark::State& state) {
  const bool compress = state.range(0) != 0;
  const uint64_t aux_pages = 1024;  // 4 MiB AUX ring
  const DrainData data = MakeDrainData(state.range(1), aux_pages * 4096);
  if (data.records.empty()) {
    state.SkipWithError("../shared/testdata not found: data 2 unavailable");
    return;
  }
  auto sim = SimulatedPmu::Create(
      {.data_pages = 64, .aux_pages = aux_pages, .aux_watermark = data.watermark});
  if (!sim.ok()) {
    state.SkipWithError(std::string(sim.status().message()).c_str());
    return;
  }
  WriterOptions wo;
  wo.compress = compress;
  wo.zstd_level = 1;
  wo.compress_threads = static_cast<int>(state.range(2));
  auto writer =
      ContainerWriter::CreateFromFd(open("/dev/null", O_WRONLY | O_CLOEXEC), "/dev/null", wo);
  if (!writer.ok()) {
    state.SkipWithError(std::string(writer.status().message()).c_str());
    return;
  }
  Drainer drainer(writer->get());
  uint64_t bytes = 0;
  size_t next = 0;
  // One iteration: 64 MiB produced and drained, then Flush() so the writer thread's
  // compression and write(2) are inside the measured time.
  for (auto _ : state) {
    for (uint64_t done = 0; done < (uint64_t{64} << 20);) {
      const std::vector<uint8_t>& record = data.records[next];
      next = (next + 1) % data.records.size();
      (*sim)->WriteTrace(record);
      auto n = drainer.DrainOnce(**sim);
      if (!n.ok()) {
        state.SkipWithError(std::string(n.status().message()).c_str());
        return;
      }
      done += record.size();
      bytes += record.size();
    }
    if (absl::Status s = (*writer)->Flush(); !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  (void)(*writer)->Close();
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["truncations"] = static_cast<double>(drainer.Totals().truncated);
  const WriterStats ws = (*writer)->stats();
  state.counters["ratio"] =
      ws.stored_bytes ? static_cast<double>(ws.raw_bytes) / static_cast<double>(ws.stored_bytes)
                      : 0;
}
BENCHMARK(BM_DrainToContainer)
    ->ArgsProduct({{0}, {0, 2}, {1}})
    ->ArgsProduct({{1}, {0, 1, 2}, {1, 2}})
    ->ArgNames({"zstd", "data", "compress_threads"})
    ->UseRealTime();

// zstd -1 alone (the library, one reused context) on the same records: the most the zstd
// drain could reach on one core; the drain's figure over this one is its efficiency.
void BM_ZstdAlone(benchmark::State& state) {
  const DrainData data = MakeDrainData(state.range(0), 1024 * 4096);
  if (data.records.empty()) {
    state.SkipWithError("../shared/testdata not found: data 2 unavailable");
    return;
  }
  std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 1);
  std::vector<uint8_t> out(ZSTD_compressBound(data.records[0].size()));
  uint64_t bytes = 0, stored = 0;
  size_t next = 0;
  for (auto _ : state) {
    const std::vector<uint8_t>& record = data.records[next];
    next = (next + 1) % data.records.size();
    const size_t n =
        ZSTD_compress2(cctx.get(), out.data(), out.size(), record.data(), record.size());
    if (ZSTD_isError(n)) {
      state.SkipWithError(ZSTD_getErrorName(n));
      return;
    }
    bytes += record.size();
    stored += n;
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["ratio"] = stored ? static_cast<double>(bytes) / static_cast<double>(stored) : 0;
}
BENCHMARK(BM_ZstdAlone)->DenseRange(0, 2)->ArgName("data");

// A producer thread paced at range(0) MB/s for 0.5 s into a range(1)-page AUX ring, against
// the real drain loop (ppoll on the wakeup eventfd, container to /dev/null). The point is the
// `truncations` counter: 0 means nothing was lost. It measures scheduling latency as much as
// copy speed: the ring must cover the longest time the drain thread is not running.
// range(2) = 0: raw container, data 0 (random branches) in 64 KiB writes, wakeup at a quarter
// of the ring (ptrecord's default). range(2) = 1: zstd-1 (the writer's default threads), data 2
// (real hardware PT) with a 32 KiB watermark, so each record is a distinct slice.
// Run under `taskset -c 0` for the 1-core figure (producer, drain and writer share it).
void BM_PacedProducerLoss(benchmark::State& state) {
  const uint64_t rate = static_cast<uint64_t>(state.range(0)) << 20;  // bytes per second
  const bool zstd = state.range(2) != 0;
  const uint64_t aux_pages = static_cast<uint64_t>(state.range(1));
  DrainData data = zstd ? MakeDrainData(2, aux_pages * 4096) : DrainData{};
  if (!zstd) {
    data.records.push_back(PtLikeBytes(64 << 10, false));
    data.watermark = aux_pages * 4096 / 4;
  }
  if (data.records.empty()) {
    state.SkipWithError("../shared/testdata not found: data 2 unavailable");
    return;
  }
  for (auto _ : state) {
    SignalWatcher signals;
    auto sim = SimulatedPmu::Create(
        {.data_pages = 64, .aux_pages = aux_pages, .aux_watermark = data.watermark});
    auto writer = ContainerWriter::CreateFromFd(open("/dev/null", O_WRONLY | O_CLOEXEC),
                                                "/dev/null", {.compress = zstd});
    if (!sim.ok() || !writer.ok()) {
      state.SkipWithError("setup failed");
      return;
    }
    Drainer drainer(writer->get());
    std::atomic<bool> done{false};
    std::thread producer([&] {
      const auto start = std::chrono::steady_clock::now();
      uint64_t sent = 0;
      size_t next = 0;
      while (true) {
        const double t =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (t >= 0.5) break;
        if (sent < static_cast<uint64_t>(t * static_cast<double>(rate))) {
          (*sim)->WriteTrace(data.records[next]);
          sent += data.records[next].size();
          next = (next + 1) % data.records.size();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
      (*sim)->EndTransaction();
      done = true;
    });
    LoopOptions lo;
    lo.poll_timeout_ms = 10;
    lo.should_stop = [&] { return done.load(); };
    TraceSource* sources[] = {sim->get()};
    auto r = RunDrainLoop(sources, drainer, signals, lo);
    producer.join();
    (void)(*writer)->Close();
    const SimStats ss = (*sim)->stats();
    state.counters["truncations"] = static_cast<double>(ss.truncations);
    state.counters["dropped_bytes"] = static_cast<double>(ss.aux_dropped);
    state.counters["MB_written"] = static_cast<double>(ss.aux_written >> 20);
    if (!r.ok()) state.SkipWithError(std::string(r.status().message()).c_str());
  }
}
BENCHMARK(BM_PacedProducerLoss)
    ->Args({500, 1024, 0})
    ->Args({1000, 1024, 0})
    ->Args({2000, 1024, 0})
    ->Args({1000, 4096, 0})
    ->Args({2000, 4096, 0})
    ->Args({250, 1024, 1})
    ->Args({400, 1024, 1})
    ->ArgNames({"MBps", "aux_pages", "zstd"})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_CopyFromRingWrapping(benchmark::State& state) {
  std::vector<uint8_t> ring(size_t{4} << 20);
  std::vector<uint8_t> out(ring.size() / 2);
  uint64_t from = ring.size() - 4096;  // wraps every time
  for (auto _ : state) {
    CopyFromRing(ring, from, out);
    benchmark::DoNotOptimize(out.data());
    from += out.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * out.size()));
}
BENCHMARK(BM_CopyFromRingWrapping);

}  // namespace
}  // namespace ptkit::record

BENCHMARK_MAIN();
