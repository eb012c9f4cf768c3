// The output forms of `ptdecode`: each is a Sink that streams while the trace decodes.
// Text formats and JSON schemas are documented in man/ptdecode.1.
#ifndef PTKIT_DECODER_SINKS_H_
#define PTKIT_DECODER_SINKS_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "decoder/decode.h"
#include "decoder/image.h"
#include "decoder/profile.h"
#include "decoder/trace_config.h"
#include "decoder/tsc_clock.h"

namespace ptkit::decoder {

// What `folded` weighs each stack by.
enum class FoldedWeight {
  kInstructions,  // instructions executed with the stack on top
  kTime,          // TSC ticks (see MakeFoldedSink); an error when the trace has no timing
};

struct OutputOptions {
  bool json = false;       // JSON (stats: one document; others: one object per line)
  bool disasm = false;     // insn: Zydis disassembly (Intel syntax)
  std::string trace_name;  // stats: named in the report
  // insn, timeline: how TSC values become wall time (perf time, TSC frequency), if known.
  TscClock clock;
  // insn, branches, calls: "file:line" of each address from DWARF (decoder/srcline.h).
  bool srcline = false;
  std::FILE* diagnostics = stderr;  // --srcline: files without DWARF are named here, once
  FoldedWeight weight = FoldedWeight::kInstructions;
  // folded: the frames written of a stack (0: all); see MakeFoldedSink.
  uint32_t max_depth = 1024;
  // stats (text): only the first N functions (0: all), and a line saying how many more.
  size_t top_functions = 0;
  // stats (text): list every loss and decode error at the end, with its stream.
  bool list_problems = false;
  // stats: count only what runs under this function (ProfileSinkOptions::only_under).
  std::string only_under;
};

// "1 stream", "2 streams": `n` and the noun, plural unless n == 1 (`plural`: when not noun+s).
std::string Counted(uint64_t n, std::string_view noun, std::string_view plural = "");
// After "N bytes lost": " (+ K of unknown size)" for K losses whose size is unknown (a process
// killed before its trace was flushed, a truncated AUX area); "" for none.
std::string UnknownSizeLosses(uint64_t k);

// Counts instructions, blocks, events and errors, and nothing else; for tests and benches.
class CountSink : public Sink {
 public:
  explicit CountSink(DecoderKind kind = DecoderKind::kBlock) : kind_(kind) {}
  DecoderKind kind() const override { return kind_; }
  void OnBlock(const pt_block& block) override {
    instructions_ += block.ninsn;
    ++blocks_;
  }
  void OnInsn(const pt_insn& insn) override { ++instructions_; }
  void OnError(const DecodeError& error) override { ++errors_; }
  uint64_t instructions() const { return instructions_; }
  uint64_t blocks() const { return blocks_; }
  uint64_t errors() const { return errors_; }

 private:
  DecoderKind kind_;
  uint64_t instructions_ = 0;
  uint64_t blocks_ = 0;
  uint64_t errors_ = 0;
};

// `insn`: one line per instruction (time, stream columns, address, symbol+offset, optional
// disassembly and file:line) with markers for enable/disable and other events, gaps and errors.
// Time is printed once the decoder reports one (Sink::OnTime): perf time "s.ns" when
// options.clock knows the conversion, else the TSC value; JSON: "tsc" (and "time_ns").
std::unique_ptr<Sink> MakeInsnSink(const ProgramImage& image, std::FILE* out,
                                   const OutputOptions& options);
// `branches`: one line per taken branch: from, to, kind.
std::unique_ptr<Sink> MakeBranchesSink(const ProgramImage& image, std::FILE* out,
                                       const OutputOptions& options);
// `calls`: the call/return tree, indented, with each call's instruction count and, when the
// trace has timing, its elapsed TSC ticks (decoder time at the return minus at the call).
std::unique_ptr<Sink> MakeCallsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options);
// `stats`: per function and per image: instructions (self, inclusive), calls; totals; errors.
// JSON (ProfileToJson): also each function's time when the trace has timing, and its source file.
std::unique_ptr<Sink> MakeStatsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options);
// What the profile sink adds to what `stats` computes.
struct ProfileSinkOptions {
  // When the trace has timing packets, each function's self time in TSC ticks too
  // (Profile::timing, its tsc_hz from OutputOptions::clock; a decoder time call per block).
  bool timing = false;
  // Each function's source file (ProfileFunction::source) from the DWARF line tables.
  bool source_files = false;
  // When set: count only what runs while the function of this name has a frame (e.g. "main":
  // no start-up before it, no exit after it); totals.instructions and calls are those too,
  // time only what its callees ran. A warning says so.
  std::string only_under;
};
// Why nothing ran under `root` (ProfileSinkOptions::only_under) when no call to it was traced:
// a trace that ends before it (`input_warnings`: a file cut short, damage; `losses`), else a
// name the symbols do not have. Starts with ": ".
std::string RootNotTracedReason(std::string_view root,
                                const std::vector<std::string>& input_warnings, uint64_t losses);
// What `stats` computes, stored in `*profile` (which must outlive the sink) at Finish instead of
// printed; `options.trace_name` names the trace in it.
std::unique_ptr<Sink> MakeProfileSink(const ProgramImage& image, const OutputOptions& options,
                                      Profile* profile, const ProfileSinkOptions& extra = {});
// `folded`: "caller;callee count" lines for flamegraph.pl, weighted by instructions or, with
// FoldedWeight::kTime, by TSC ticks: each decoder time update closes an interval whose ticks
// are split over the stacks that executed instructions in it, in proportion to their
// instructions (an interval without instructions goes to the stack on top at its end; so does
// the time from a disable at a system call or an interrupt to the enable after it).
// Ticks after the last time update of a decoded piece, or across an error or lost trace, are
// not counted. Finish fails with kFailedPrecondition when the trace had no timing at all.
// A stack deeper than options.max_depth frames (when not 0) is written as its outermost
// max_depth frames, one frame "[deeper frames]" for all those above them, and the function
// running on top: a runaway recursion's lines do not grow with its depth (one line per depth:
// the output would grow with the square of it), and stderr says the deepest stack cut.
std::unique_ptr<Sink> MakeFoldedSink(const ProgramImage& image, std::FILE* out,
                                     const OutputOptions& options);
// `timeline`: Chrome trace-event JSON, one slice per call. "ts" is in microseconds from the
// trace's TSC when it has timing (perf time with options.clock.perf, else TSC / tsc_hz; with
// neither, TSC ticks), else it counts instructions; "otherData" says which ("ts_unit").
std::unique_ptr<Sink> MakeTimelineSink(const ProgramImage& image, std::FILE* out,
                                       const OutputOptions& options);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_SINKS_H_
