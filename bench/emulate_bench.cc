// ptrecord --emulate's cost: single-steps per second (ptrace round trips) on a real program,
// alone and with encoding + draining into a container. Workload: /bin/true (dynamic: the
// loader's relocation work is the bulk of it).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>

#include "record/emulate/emulate.h"
#include "record/emulate/stepper.h"

namespace {

class CountingSink : public ptkit::emulate::StepSink {
 public:
  void OnThreadStart(uint32_t, uint32_t) override {}
  void OnEvent(uint32_t, const ptkit::swpt::Event&) override { ++events; }
  void OnInstruction(uint32_t, uint64_t) override { ++instructions; }
  void OnThreadEnd(uint32_t) override {}
  uint64_t events = 0, instructions = 0;
};

void BM_StepOnly(benchmark::State& state) {
  uint64_t steps = 0, instructions = 0, events = 0;
  for (auto _ : state) {
    CountingSink sink;
    ptkit::emulate::StepperOptions o;
    o.argv = {"/bin/true"};
    auto r = ptkit::emulate::RunStepped(o, sink);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    steps += r->steps;
    instructions += r->instructions;
    events += sink.events;
  }
  state.counters["steps/s"] = benchmark::Counter(steps, benchmark::Counter::kIsRate);
  state.counters["insn/run"] = static_cast<double>(instructions) / state.iterations();
  state.counters["events/run"] = static_cast<double>(events) / state.iterations();
}
BENCHMARK(BM_StepOnly)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RecordEmulated(benchmark::State& state) {
  const char* d = std::getenv("PTKIT_BENCH_DIR");
  std::string dir = d && *d ? d : "bench-out";
  std::filesystem::create_directories(dir);
  uint64_t steps = 0, aux = 0;
  for (auto _ : state) {
    ptkit::emulate::EmulateOptions o;
    o.argv = {"/bin/true"};
    o.output = dir + "/emulate.pt";
    o.overwrite_existing = true;
    auto r = ptkit::emulate::RecordEmulated(o);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    steps += r->steps.steps;
    aux += r->totals.aux_bytes;
  }
  state.counters["steps/s"] = benchmark::Counter(steps, benchmark::Counter::kIsRate);
  state.counters["pt_bytes/run"] = static_cast<double>(aux) / state.iterations();
}
BENCHMARK(BM_RecordEmulated)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
