// Container decoding at scale: `ptdecode stats` (DecodeContainer + the stats sink to /dev/null)
// on a trace.pt whose single AUX stream is PTKIT_BENCH_AUX_MIB MiB (default 1100: more than
// 1 GiB), synthesized once by swpt (interp_O2_nopie, a signal every 50 instructions, TSC) into
// $PTKIT_BENCH_DIR and kept there.
//
// Each run decodes in a child process so that its memory is its own: the child reports its
// VmHWM (peak resident set, file-backed pages included) and the parent samples its RssAnon
// (anonymous memory) every 10 ms. The goal: memory bounded however long the trace is.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "benchmark/benchmark.h"
#include "decoder/container_input.h"
#include "decoder/sinks.h"
#include "record/swpt/synth_container.h"
#include "record/swpt/synthesizer.h"

namespace ptkit::decoder {
namespace {

std::string BenchDir() {
  const char* d = std::getenv("PTKIT_BENCH_DIR");
  std::string dir = d && *d ? d : "bench-out";
  std::filesystem::create_directories(dir);
  return dir;
}

uint64_t AuxMiB() {
  const char* s = std::getenv("PTKIT_BENCH_AUX_MIB");
  return s && *s ? std::strtoull(s, nullptr, 10) : 1100;
}

// A status file field in KiB ("VmHWM", "RssAnon"), 0 when absent.
uint64_t StatusKiB(const std::string& status_path, const std::string& field) {
  std::ifstream in(status_path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0)
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10);
  }
  return 0;
}

// Synthesizes the container in a child (the walk holds the whole trace in memory).
std::string Container() {
  const uint64_t mib = AuxMiB();
  std::string path = BenchDir() + "/decode_" + std::to_string(mib) + "mib.pt";
  if (std::filesystem::exists(path)) return path;
  pid_t child = fork();
  if (child == 0) {
    auto synth =
        swpt::Synthesizer::Create(std::string(PTKIT_SWPT_PROGRAM_DIR) + "/interp_O2_nopie");
    if (!synth.ok()) _exit(1);
    swpt::SynthOptions options;
    options.max_insns = mib * 2'106'000;  // ~0.5 PT bytes per instruction with these options
    options.signal_every = 50;
    options.pt.tsc = true;
    options.keep_truth = false;
    auto walk = synth->Walk(options);
    if (!walk.ok()) _exit(1);
    const std::string tmp = path + ".tmp";
    if (!swpt::WriteSynthContainer(tmp, synth->image(), options, *walk).ok()) _exit(1);
    std::filesystem::rename(tmp, path);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? path : "";
}

struct ChildResult {
  uint64_t instructions = 0;
  uint64_t trace_bytes = 0;
  uint64_t vm_hwm_kib = 0;
  bool ok = false;
};

void BM_ContainerStats(benchmark::State& state) {
  const std::string path = Container();
  if (path.empty()) return state.SkipWithError("cannot synthesize the container");
  uint64_t insns = 0, bytes = 0, hwm = 0, anon = 0;
  for (auto _ : state) {
    int fds[2];
    if (pipe(fds) != 0) return state.SkipWithError("pipe");
    pid_t child = fork();
    if (child == 0) {
      close(fds[0]);
      ChildResult r;
      std::FILE* null = std::fopen("/dev/null", "w");
      auto empty = ProgramImage::Create();
      auto sink = MakeStatsSink(**empty, null, {});
      auto totals = DecodeContainer(path, {}, *sink);
      if (totals.ok()) {
        r = {totals->instructions, totals->trace_bytes, StatusKiB("/proc/self/status", "VmHWM"),
             true};
      }
      (void)!write(fds[1], &r, sizeof(r));
      _exit(0);
    }
    close(fds[1]);
    const std::string status = "/proc/" + std::to_string(child) + "/status";
    int wstatus = 0;
    while (waitpid(child, &wstatus, WNOHANG) == 0) {
      anon = std::max(anon, StatusKiB(status, "RssAnon"));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ChildResult r;
    const bool got = read(fds[0], &r, sizeof(r)) == static_cast<ssize_t>(sizeof(r));
    close(fds[0]);
    if (!got || !r.ok) return state.SkipWithError("decoding failed");
    insns += r.instructions;
    bytes += r.trace_bytes;
    hwm = std::max(hwm, r.vm_hwm_kib);
  }
  state.counters["insn/s"] =
      benchmark::Counter(static_cast<double>(insns), benchmark::Counter::kIsRate);
  state.counters["aux_MiB"] =
      static_cast<double>(bytes) / static_cast<double>(state.iterations()) / (1 << 20);
  state.counters["VmHWM_KiB"] = static_cast<double>(hwm);
  state.counters["RssAnon_peak_KiB"] = static_cast<double>(anon);
}
BENCHMARK(BM_ContainerStats)->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);

}  // namespace
}  // namespace ptkit::decoder

BENCHMARK_MAIN();
