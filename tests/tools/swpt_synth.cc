// swpt_synth: synthesizes an Intel PT trace by walking a real ELF executable (record/swpt).
//
//   swpt_synth --elf build/.../interp_O2_pie --insns 1000000 --seed 7 --out walk.pt
//              --truth walk.truth
//
// Writes the raw PT bytes, optionally BTS records and the ground truth (one hex IP per line),
// and prints the image arguments a decoder needs (ELF path and load base), also written to
// OUT.args.
#include <cstdio>
#include <fstream>
#include <string>

#include "CLI/CLI.hpp"
#include "fmt/format.h"
#include "record/swpt/synth_container.h"
#include "record/swpt/synthesizer.h"

namespace {

bool WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape): a bug; terminate says it
  CLI::App app{"swpt_synth: synthesize an Intel PT trace from a walk over real ELF code"};
  std::string elf, out = "walk.pt", truth, bts;
  ptkit::swpt::SynthOptions options;
  uint64_t pie_base = ptkit::swpt::CodeImage::kDefaultPieBase;
  bool noretcomp = false;
  int psb_period = 0, tnt_bits = 6;
  app.add_option("--elf", elf, "ELF executable to walk")->required();
  app.add_option("--entry", options.entry, "Function to start at")->capture_default_str();
  app.add_option("--insns", options.max_insns, "Instructions to walk")->capture_default_str();
  app.add_option("--seed", options.seed, "Branch oracle seed")->capture_default_str();
  app.add_option("--pie-base", pie_base, "Load base of a PIE")->capture_default_str();
  app.add_option("--targets", options.target_prefix, "Indirect target function name prefix");
  app.add_flag("--noretcomp", noretcomp, "Disable RET compression");
  app.add_option("--psb-period", psb_period, "PSB every 2^(n+11) bytes")->capture_default_str();
  app.add_option("--tnt-bits", tnt_bits, "Max TNT bits per packet (7..47: TNT-64)")
      ->capture_default_str();
  app.add_flag("--tsc", options.pt.tsc, "TSC packets");
  app.add_flag("--mtc", options.pt.mtc, "MTC/TMA packets");
  app.add_flag("--cyc", options.pt.cyc, "CYC packets");
  app.add_option("--tick-every", options.tick_every, "Timing tick every N instructions");
  app.add_option("--signal-every", options.signal_every, "A signal every N instructions");
  app.add_option("--overflow-every", options.overflow_every, "Inject OVF every N instructions");
  app.add_option("--out", out, "Raw PT output")->capture_default_str();
  app.add_option("--truth", truth, "Ground truth output (hex IP per line)");
  app.add_option("--bts", bts, "BTS records output");
  std::string container;
  app.add_option("--container", container, "Also write a complete trace.pt here");
  bool container_bts = false;
  app.add_flag("--container-bts", container_bts,
               "The trace.pt is an intel_bts recording of the BTS records (needs --bts)");
  CLI11_PARSE(app, argc, argv);

  options.pt.ret_compression = !noretcomp;
  options.pt.psb_period = static_cast<uint8_t>(psb_period);
  options.pt.max_tnt_bits = static_cast<uint8_t>(tnt_bits);
  options.bts = !bts.empty();
  options.keep_truth = !truth.empty();
  auto synth = ptkit::swpt::Synthesizer::Create(elf, pie_base);
  if (!synth.ok()) {
    fmt::print(stderr, "swpt_synth: {}\n", synth.status().ToString());
    return 1;
  }
  auto result = synth->Walk(options);
  if (!result.ok()) {
    fmt::print(stderr, "swpt_synth: {}\n", result.status().ToString());
    return 1;
  }
  if (!WriteFile(out, result->pt) || (!bts.empty() && !WriteFile(bts, result->bts))) {
    fmt::print(stderr, "swpt_synth: cannot write output\n");
    return 1;
  }
  if (!truth.empty()) {
    std::FILE* f = std::fopen(truth.c_str(), "w");
    if (!f) {
      fmt::print(stderr, "swpt_synth: cannot write {}\n", truth);
      return 1;
    }
    for (uint64_t ip : result->truth) fmt::print(f, "{:x}\n", ip);
    if (std::fclose(f) != 0) {
      fmt::print(stderr, "swpt_synth: cannot write {}\n", truth);
      return 1;
    }
  }
  if (!container.empty()) {
    ptkit::swpt::SynthContainerOptions copts;
    copts.command_line.assign(argv, argv + argc);
    copts.bts = container_bts;
    absl::Status st =
        ptkit::swpt::WriteSynthContainer(container, synth->image(), options, *result, copts);
    if (!st.ok()) {
      fmt::print(stderr, "swpt_synth: {}\n", st.ToString());
      return 1;
    }
  }
  // The image arguments for the decoder, also saved next to the trace.
  std::string args =
      fmt::format("--pt {} --elf {}:{:#x}", out, synth->image().path(), synth->image().exec_base());
  std::ofstream(out + ".args") << args << "\n";
  fmt::print("{} bytes, {} instructions, {} PSBs, stop: {}\nptdecode insn {}\n", result->pt.size(),
             result->insns, result->psbs.size(), result->stop_reason, args);
  return 0;
}
