// `ptdecode samples`: the AUX samples of a recording (ptrecord --aux-sample), each with the
// branch history its trace snippet holds. Each snippet is decoded on its own with libipt's
// instruction decoder from its first PSB, with the images of the sample's process at the
// sample's time, and cut at the sampled IP: the trace ends where tracing was stopped to take
// the sample, so the decoded flow runs on (without packets) only up to the next branch that
// needs one, past the sampled IP; the flow ends at the last time it reaches that IP.
#ifndef PTKIT_DECODER_SAMPLES_H_
#define PTKIT_DECODER_SAMPLES_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decoder/image.h"
#include "decoder/recording.h"
#include "decoder/trace_config.h"

namespace ptkit::decoder {

struct SampleBranch {
  uint64_t from = 0, to = 0;
  // "jcc", "jmp", "call", "ret", "far_jmp", ...; "untraced": tracing stopped at `from` (a branch
  // out of the filter regions went there) and resumed at `to`, where the flow came back.
  const char* kind = "";
  bool call_returned = false;  // "untraced" after a CALL out, resumed at its return address
  friend bool operator==(const SampleBranch& a, const SampleBranch& b) {
    return a.from == b.from && a.to == b.to;
  }
};

// What one snippet decodes to.
struct SnippetFlow {
  bool synced = false;   // the snippet held a PSB the decoder could start at
  bool reached = false;  // the decoded flow reaches the sampled IP
  uint64_t errors = 0;   // decode errors (the flow restarts at the next PSB after each)
  int first_error = 0;   // its pt_error_code
  // The instructions since the last (re)synchronisation, oldest first, ending with the
  // sampled IP when `reached`.
  std::vector<uint64_t> insns;
  std::vector<SampleBranch> branches;  // the taken branches among them, oldest first
};

// Decodes `snippet` (PT bytes) against `image` and cuts the flow at `ip` as described above.
// Errors: kInvalidArgument for a configuration libipt rejects, kResourceExhausted when no
// decoder can be allocated.
absl::StatusOr<SnippetFlow> DecodeSnippet(std::span<const uint8_t> snippet,
                                          const TraceConfig& config, const ProgramImage& image,
                                          uint64_t ip);

struct SamplesOptions {
  bool json = false;
  size_t branches = 16;       // the last N taken branches shown per sample (0: all)
  bool instructions = false;  // also list the decoded instructions
  // Instead of one entry per sample: a sampled profile in folded-stack form, "f1;f2;f3 N" per
  // stack (flamegraph.pl), each sample's stack rebuilt from the calls and returns its snippet
  // holds (SampleStack). `samples --folded`, `folded --samples`.
  bool folded = false;
  // Instead of one entry per sample: a sampled profile per function (`stats --samples`): the
  // samples whose IP is in it (self) and those whose rebuilt stack holds it (total, once per
  // sample), text or JSON (schema ptkit-sample-stats/1, ptdecode(1)).
  bool stats = false;
};

// The functions on the stack at the end of `flow` (outermost first), rebuilt from its calls
// and returns: the function of its first instruction, a call pushes the callee, a return pops
// (or, with nothing left to pop, replaces the outermost frame by the caller it returns into),
// a jump into another function replaces the innermost frame (tail call); where tracing
// resumes after code outside the filter regions ran ("untraced"), the call out returned, or
// the stack is "[not traced]" and the function it resumed in. The snippet's history
// is short: frames entered before it began are not known. Functions are named by `image`'s
// symbols ("[file]" without one).
std::vector<std::string> SampleStack(const SnippetFlow& flow, const ProgramImage& image);

struct SamplesTotals {
  uint64_t samples = 0;  // shown (options.tid and options.cpu select them)
  uint64_t unsynced = 0;
  uint64_t not_reached = 0;  // synchronised, but the flow never reached the sampled IP
  uint64_t malformed = 0;    // sample records that did not parse (not shown)
};

// Prints every sample of `r` (text or JSON, ptdecode(1)) to `out`, only those of thread
// options.tid and CPU options.cpu when set. Errors: kNotFound when the recording has no
// samples (or none selected), saying why; decode setup errors; kDataLoss on output errors.
absl::StatusOr<SamplesTotals> PrintSamples(const Recording& r, const RecordingOptions& options,
                                           const SamplesOptions& samples, std::FILE* out);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_SAMPLES_H_
