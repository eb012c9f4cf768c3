// Drain throughput: the simulated PMU fills half its AUX ring (one watermark), the Drainer
// moves it into a ContainerWriter writing to /dev/null; 64 MiB per iteration. Producer and drain
// share the calling thread (run under `taskset -c 0` for the 1-core figure); the writer thread
// compresses and writes, with a helper thread when compress_threads is 2.
#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "benchmark/benchmark.h"
#include "ptkit/container_writer.h"
#include "record/drain.h"
#include "record/drain_loop.h"
#include "record/ring.h"
#include "record/sim_pmu.h"

namespace ptkit::record {
namespace {

// Bytes with PT-like redundancy: short packets from a small alphabet, so zstd has realistic
// work (real PT compresses about 3-6x with zstd -1).
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

void BM_DrainToContainer(benchmark::State& state) {
  const bool compress = state.range(0) != 0;
  const bool loop = state.range(1) != 0;
  const uint64_t aux_pages = 1024;  // 4 MiB AUX ring
  auto sim = SimulatedPmu::Create({.data_pages = 64, .aux_pages = aux_pages});
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
  const uint64_t chunk = (*sim)->ring().aux.size() / 2;
  const std::vector<uint8_t> data = PtLikeBytes(chunk, loop);
  uint64_t bytes = 0;
  // One iteration: 64 MiB produced and drained, then Flush() so the writer thread's
  // compression and write(2) are inside the measured time.
  for (auto _ : state) {
    for (uint64_t done = 0; done < (uint64_t{64} << 20); done += chunk) {
      (*sim)->WriteTrace(data);
      auto n = drainer.DrainOnce(**sim);
      if (!n.ok()) {
        state.SkipWithError(std::string(n.status().message()).c_str());
        return;
      }
      bytes += chunk;
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
    ->Args({0, 0, 1})
    ->Args({1, 0, 1})
    ->Args({1, 1, 1})
    ->Args({1, 0, 2})
    ->Args({1, 1, 2})
    ->ArgNames({"zstd", "loop", "compress_threads"})
    ->UseRealTime();

// A producer thread paced at range(0) MB/s for 0.5 s into a range(1)-page AUX ring, against
// the real drain loop (ppoll on the wakeup eventfd, raw container to /dev/null). The point
// is the `truncations` counter: 0 means nothing was lost. It measures scheduling latency as
// much as copy speed: the ring must cover the longest time the drain thread is not running.
void BM_PacedProducerLoss(benchmark::State& state) {
  const uint64_t rate = static_cast<uint64_t>(state.range(0)) << 20;  // bytes per second
  for (auto _ : state) {
    SignalWatcher signals;
    // ptrecord's defaults: 4 MiB AUX, wakeup at a quarter of it.
    const uint64_t aux_pages = static_cast<uint64_t>(state.range(1));
    auto sim = SimulatedPmu::Create(
        {.data_pages = 64, .aux_pages = aux_pages, .aux_watermark = aux_pages * 4096 / 4});
    auto writer = ContainerWriter::CreateFromFd(open("/dev/null", O_WRONLY | O_CLOEXEC),
                                                "/dev/null", {.compress = false});
    if (!sim.ok() || !writer.ok()) {
      state.SkipWithError("setup failed");
      return;
    }
    Drainer drainer(writer->get());
    const std::vector<uint8_t> chunk = PtLikeBytes(64 << 10, false);
    std::atomic<bool> done{false};
    std::thread producer([&] {
      const auto start = std::chrono::steady_clock::now();
      uint64_t sent = 0;
      while (true) {
        const double t =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (t >= 0.5) break;
        if (sent < static_cast<uint64_t>(t * static_cast<double>(rate))) {
          (*sim)->WriteTrace(chunk);
          sent += chunk.size();
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
    ->Args({500, 1024})
    ->Args({1000, 1024})
    ->Args({2000, 1024})
    ->Args({1000, 4096})
    ->Args({2000, 4096})
    ->ArgNames({"MBps", "aux_pages"})
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
