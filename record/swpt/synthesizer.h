// Trace synthesizer: walks the real code of an ELF executable as if it ran, deciding conditional
// branches with a seeded PRNG, and feeds every retired control-flow event to the software PT
// encoder (and optionally the BTS writer). The ground truth, the list of retired instruction
// addresses, is kept so a decoder can be checked against it.
//
// How it walks (x86-64, decoded with Zydis, cached per address):
//  - conditional branches: taken with `backward_taken` (loop back edges, < 1 so loops exit) or
//    `forward_taken` probability;
//  - direct jumps and calls are followed, RETs return through a shadow stack;
//  - indirect jumps: a target from the jump table when one is found (PIE `lea table(%rip)` +
//    relative entries, or absolute `table(,%reg,8)` entries), else a function entry; indirect
//    calls: a function entry;
//  - a jump or call through the GOT (PLT stubs, -fno-plt) leaves the image: tracing is disabled
//    (TIP.PGD with the outside target) and enabled again (TIP.PGE) at the return address, as an
//    address filter on the image would do; a RET with an empty shadow stack leaves the same way
//    and the walk re-enters at the entry function;
//  - SYSCALL: TIP.PGD without IP and TIP.PGE at the next instruction (user-only tracing);
//  - HLT, UD2, INT*, far transfers, XBEGIN, undecodable or unmapped code end the walk early.
// The trace ends after `max_insns` instructions with FUP + TIP.PGD at the next instruction.
#ifndef PTKIT_RECORD_SWPT_SYNTHESIZER_H_
#define PTKIT_RECORD_SWPT_SYNTHESIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "record/swpt/code_image.h"
#include "record/swpt/pt_encoder.h"

namespace ptkit::swpt {

struct SynthOptions {
  // Where the walk starts and re-enters: a function name, a run-time address ("0x401000"),
  // or "*" for a random function (from the indirect target candidates) each time.
  std::string entry = "main";
  uint64_t max_insns = 10000;
  uint64_t seed = 1;
  // Indirect call/jump targets: functions whose name starts with this prefix; empty means every
  // function not starting with '_'; when there is none (stripped image), the targets of the
  // image's direct calls.
  std::string target_prefix;
  double forward_taken = 0.5;
  double backward_taken = 0.75;
  bool keep_truth = true;
  bool bts = false;         // Also write BTS records.
  uint64_t tick_every = 0;  // A kTick of this many cycles every so many instructions (0: none).
  // A signal every so many instructions (0: none): the handler is a function entry (as for
  // indirect calls), entered either asynchronously with tracing on (FUP + TIP) or, as with
  // user-only tracing, through the kernel (FUP + TIP.PGD, then TIP.PGE at the handler); its
  // RET leaves the image (to the sigreturn trampoline) and tracing resumes at the interrupted
  // instruction.
  uint64_t signal_every = 0;
  // Inject an internal buffer overflow (OVF + FUP) after every so many instructions, at the next
  // branch that produced a packet, so that no instruction is lost to the decoder.
  uint64_t overflow_every = 0;
  PtEncoderOptions pt;
};

// A PSB in the synthesized trace: decoding from `offset` yields truth[insn_index...].
struct SynthPsb {
  uint64_t offset = 0;
  uint64_t insn_index = 0;
};

struct SynthResult {
  std::vector<uint8_t> pt;
  std::vector<uint8_t> bts;
  std::vector<uint64_t> truth;  // Retired instruction addresses (if keep_truth).
  std::vector<SynthPsb> psbs;
  uint64_t insns = 0;
  uint64_t events = 0;
  uint64_t branches = 0;     // Conditional branches.
  uint64_t indirect = 0;     // Indirect jumps and calls, and returns (compressed or not).
  uint64_t table_jumps = 0;  // Indirect jumps whose target came from a jump table.
  uint64_t exits = 0;        // Times the walk left the image (GOT calls, top-level returns).
  uint64_t signals = 0;
  uint64_t overflows = 0;
  std::string stop_reason;  // Why the walk ended ("max_insns" or what stopped it early).
};

// Not thread-safe (Walk fills a shared decode cache): use one Synthesizer per thread.
class Synthesizer {
 public:
  // Loads the ELF file (see CodeImage::Load for what can fail).
  static absl::StatusOr<Synthesizer> Create(const std::string& elf_path,
                                            uint64_t pie_base = CodeImage::kDefaultPieBase);
  Synthesizer(Synthesizer&&) noexcept;
  Synthesizer& operator=(Synthesizer&&) noexcept;
  ~Synthesizer();

  // One seeded walk. Deterministic for the same image and options. Decoded instructions are
  // cached across walks. Fails with NotFound when the entry function (or address) is missing,
  // FailedPrecondition when no indirect target candidates exist but one is needed,
  // InvalidArgument for bad encoder options.
  absl::StatusOr<SynthResult> Walk(const SynthOptions& options);

  const CodeImage& image() const;

 private:
  struct State;
  explicit Synthesizer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace ptkit::swpt

#endif  // PTKIT_RECORD_SWPT_SYNTHESIZER_H_
