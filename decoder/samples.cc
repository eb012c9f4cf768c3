#include "decoder/samples.h"

#include <fmt/format.h>
#include <intel-pt.h>
#include <linux/perf_event.h>

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "decoder/decode.h"
#include "decoder/ipt_handles.h"
#include "decoder/output_format.h"
#include "decoder/progress.h"
#include "decoder/sinks.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

// The function containing `ip`, by name.
std::string FunctionName(const ProgramImage& image, uint64_t ip) {
  const int s = image.SymbolAt(ip);
  if (s >= 0) return image.symbols()[s].name;
  const int file = image.FileAt(ip);
  return file < 0 ? "[unmapped]" : FileLabel(image.files()[file].name);
}

struct Insn {
  uint64_t ip = 0;
  uint8_t size = 0;
  pt_insn_class iclass = ptic_other;
};

// stats --samples: one function's samples.
struct SampledFunction {
  uint64_t self = 0;   // samples taken in it
  uint64_t total = 0;  // samples with it on the rebuilt stack (or taken in it)
};

std::string Percent(uint64_t n, uint64_t of) {
  return fmt::format("{:.1f}%", of ? 100.0 * static_cast<double>(n) / static_cast<double>(of) : 0);
}

// The `stats --samples` table (or its JSON document) of `functions`: by self, then total
// (descending), then name.
void AppendSampleStats(const std::string& trace, const SamplesTotals& totals,
                       const std::map<std::string, SampledFunction>& functions,
                       const std::vector<std::string>& warnings, bool json, Buffer& buf) {
  std::vector<std::pair<std::string, SampledFunction>> rows(functions.begin(), functions.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second.self, a.second.total) > std::pair(b.second.self, b.second.total);
  });
  auto it = std::back_inserter(buf);
  const uint64_t n = totals.samples;
  if (json) {
    buf.append(std::string_view("{\"schema\":\"ptkit-sample-stats/1\",\"trace\":"));
    AppendJsonString(buf, trace);
    fmt::format_to(it,
                   ",\"totals\":{{\"samples\":{},\"unsynced\":{},\"not_reached\":{},"
                   "\"malformed\":{}}},\"functions\":[",
                   n, totals.unsynced, totals.not_reached, totals.malformed);
    for (size_t i = 0; i < rows.size(); ++i) {
      buf.append(std::string_view(i ? ",{\"function\":" : "{\"function\":"));
      AppendJsonString(buf, rows[i].first);
      fmt::format_to(it, ",\"self\":{},\"total\":{}}}", rows[i].second.self, rows[i].second.total);
    }
    buf.append(std::string_view("],\"warnings\":["));
    for (size_t i = 0; i < warnings.size(); ++i) {
      if (i) buf.push_back(',');
      AppendJsonString(buf, warnings[i]);
    }
    buf.append(std::string_view("]}\n"));
    return;
  }
  fmt::format_to(it,
                 "sampled profile of {}: {} ({} with a stack rebuilt from their snippet, {} "
                 "unsynchronised, {} not reaching the sampled IP{})\n",
                 trace, Counted(n, "sample"), n - totals.unsynced - totals.not_reached,
                 totals.unsynced, totals.not_reached,
                 totals.malformed ? fmt::format(", {} malformed (skipped)", totals.malformed) : "");
  fmt::format_to(it, "{:>10} {:>7} {:>10} {:>7}  function\n", "self", "self%", "total", "total%");
  for (const auto& [name, f] : rows) {
    fmt::format_to(it, "{:>10} {:>7} {:>10} {:>7}  {}\n", f.self, Percent(f.self, n), f.total,
                   Percent(f.total, n), name);
  }
  for (const std::string& w : warnings) fmt::format_to(it, "warning: {}\n", w);
}

}  // namespace

absl::StatusOr<SnippetFlow> DecodeSnippet(std::span<const uint8_t> snippet,
                                          const TraceConfig& config, const ProgramImage& image,
                                          uint64_t ip) {
  SnippetFlow flow;
  if (snippet.empty()) return flow;
  PTKIT_ASSIGN_OR_RETURN(pt_config pt, MakePtConfig(snippet, config));
  InsnDecoderPtr dec(pt_insn_alloc_decoder(&pt));
  if (!dec) return absl::ResourceExhaustedError("libipt: cannot allocate an instruction decoder");
  if (int err = pt_insn_set_image(dec.get(), image.image()); err < 0) {
    return absl::InternalError(fmt::format("pt_insn_set_image: {}", pt_errstr(pt_errcode(err))));
  }
  std::vector<Insn> insns;
  // Where a branch out of the filter regions stopped tracing (TIP.PGD with its target): before
  // insns[first], at `second`.
  std::vector<std::pair<size_t, uint64_t>> disabled;
  int status = pt_insn_sync_forward(dec.get());
  while (status >= 0) {
    flow.synced = true;
    insns.clear();  // the flow before an error is not continuous with what follows
    disabled.clear();
    // Unlike a whole-trace decode, pts_eos does not stop the walk: the instructions after the
    // last packet, up to the next branch that needs one, lead to the sampled IP.
    for (;;) {
      while (status & pts_event_pending) {
        pt_event event;
        status = pt_insn_event(dec.get(), &event, sizeof(event));
        if (status < 0) break;
        if (event.type == ptev_disabled && !event.ip_suppressed && !insns.empty()) {
          disabled.emplace_back(insns.size(), event.variant.disabled.ip);
        }
      }
      if (status < 0) break;
      pt_insn insn;
      insn.iclass = ptic_error;
      status = pt_insn_next(dec.get(), &insn, sizeof(insn));
      if (insn.iclass != ptic_error) insns.push_back({insn.ip, insn.size, insn.iclass});
      if (status < 0) break;
      if (insns.size() > kMaxInsnsWithoutProgress) {
        status = -kErrorLoop;  // code that loops without packets, or the wrong code
        break;
      }
    }
    if (status == -pte_eos) break;
    if (flow.errors++ == 0) flow.first_error = -status;
    insns.clear();
    status = pt_insn_sync_forward(dec.get());
  }
  // The last time the flow is at the sampled IP: past it the decoder only ran on to the next
  // branch without a packet (the sample was taken before that branch).
  size_t end = insns.size();
  for (size_t i = insns.size(); i-- > 0;) {
    if (insns[i].ip == ip) {
      end = i + 1;
      flow.reached = true;
      break;
    }
  }
  insns.resize(end);
  auto out = disabled.begin();
  for (size_t i = 0; i < insns.size(); ++i) {
    flow.insns.push_back(insns[i].ip);
    if (i + 1 == insns.size()) break;
    const Insn& a = insns[i];
    const char* kind = BranchKind(a.iclass);
    const uint64_t next = insns[i + 1].ip;
    while (out != disabled.end() && out->first <= i) ++out;
    if (out != disabled.end() && out->first == i + 1) {
      // The branch went out of the regions (to the TIP.PGD's target); the flow resumed at next.
      if (kind != nullptr) flow.branches.push_back({a.ip, out->second, kind});
      const bool call = a.iclass == ptic_call || a.iclass == ptic_far_call;
      flow.branches.push_back({out->second, next, "untraced", call && next == a.ip + a.size});
      continue;
    }
    if (kind == nullptr) continue;
    // Not taken, or a SYSCALL (libipt's far call) that returned to the next instruction.
    if (next == a.ip + a.size) continue;
    flow.branches.push_back({a.ip, next, kind});
  }
  return flow;
}

std::vector<std::string> SampleStack(const SnippetFlow& flow, const ProgramImage& image) {
  std::vector<std::string> frames;
  if (flow.insns.empty()) return frames;
  frames.push_back(FunctionName(image, flow.insns.front()));
  for (const SampleBranch& b : flow.branches) {
    const std::string to = FunctionName(image, b.to);
    if (std::string_view(b.kind) == "untraced") {
      if (!b.call_returned) {
        frames = {"[not traced]", to};  // what ran outside the regions is not known
        continue;
      }
      if (frames.size() > 1) frames.pop_back();
      frames.back() = to;
    } else if (std::string_view(b.kind) == "call" || std::string_view(b.kind) == "far_call") {
      frames.push_back(to);
    } else if (std::string_view(b.kind) == "ret" || std::string_view(b.kind) == "far_ret") {
      if (frames.size() > 1) frames.pop_back();
      frames.back() = to;  // the caller, also when the snippet never saw it called
    } else if (frames.back() != to) {
      frames.back() = to;
    }
  }
  return frames;
}

absl::StatusOr<SamplesTotals> PrintSamples(const Recording& r, const RecordingOptions& options,
                                           const SamplesOptions& so, std::FILE* file) {
  SamplesTotals totals;
  totals.malformed = r.malformed_samples;
  if (r.samples.empty()) {
    return absl::NotFoundError(fmt::format(
        "{}: the recording has no AUX samples{} (record them with ptrecord --aux-sample)", r.name,
        r.malformed_samples ? fmt::format(" that parse ({} malformed)", r.malformed_samples) : ""));
  }
  if (r.bts) {
    return absl::InvalidArgumentError(
        fmt::format("{}: samples of an intel_bts recording cannot be decoded", r.name));
  }
  const TraceConfig config = options.config.Over(r.config);
  Output out(file);
  Buffer& buf = out.buf();
  auto it = std::back_inserter(buf);
  if (so.json && !so.folded && !so.stats) buf.append(std::string_view("{\"samples\":["));
  bool first = true;
  std::map<std::string, uint64_t> stacks;            // folded: stack -> samples
  std::map<std::string, SampledFunction> functions;  // stats: by name
  ProgressLine progress(options.progress);
  uint64_t seen = 0;
  PTKIT_ASSIGN_OR_RETURN(
      std::vector<std::string> warnings,
      ForEachSample(
          r, options,
          [&](const AuxSample& s, const ProgramImage& image,
              std::span<const uint8_t> snippet) -> absl::Status {
            progress.Update(++seen, r.samples.size(), "samples");
            const perf::Sample& f = s.fields;
            if (options.tid && f.tid != *options.tid) return absl::OkStatus();
            if (options.cpu && (!(s.sample_type & PERF_SAMPLE_CPU) || f.cpu != *options.cpu)) {
              return absl::OkStatus();
            }
            PTKIT_ASSIGN_OR_RETURN(SnippetFlow flow, DecodeSnippet(snippet, config, image, f.ip));
            ++totals.samples;
            if (!flow.synced) ++totals.unsynced;
            if (flow.synced && !flow.reached) ++totals.not_reached;
            if (so.folded || so.stats) {
              // A flow that never reaches the sampled IP (it ran outside the filter regions)
              // has the stack of another place: the sample has none.
              std::vector<std::string> frames =
                  flow.reached ? SampleStack(flow, image) : std::vector<std::string>{};
              const std::string leaf = FunctionName(image, f.ip);
              if (so.stats) {
                // Self: where the sample was taken (also when the flow never got there).
                ++functions[leaf].self;
                std::set<std::string_view> on_stack(frames.begin(), frames.end());
                on_stack.insert(leaf);
                on_stack.erase("[not traced]");  // not a function
                for (std::string_view name : on_stack) ++functions[std::string(name)].total;
                return absl::OkStatus();
              }
              if (frames.empty()) {  // no history: the sample counts, under a name saying so
                frames = {flow.synced ? "[not traced]" : "[unsynchronised]", leaf};
              }
              std::string stack;
              for (const std::string& frame : frames) stack += (stack.empty() ? "" : ";") + frame;
              ++stacks[stack];
              return absl::OkStatus();
            }
            Symbolizer names(image);
            const bool has_cpu = s.sample_type & PERF_SAMPLE_CPU;
            const size_t shown = so.branches == 0 || flow.branches.size() < so.branches
                                     ? flow.branches.size()
                                     : so.branches;
            const std::span<const SampleBranch> last = std::span(flow.branches).last(shown);
            // PERF_SAMPLE_CALLCHAIN (ptrecord -g): the kernel's call chain, innermost first,
            // without its context markers (PERF_CONTEXT_USER, ...).
            std::vector<uint64_t> chain;
            if (s.sample_type & PERF_SAMPLE_CALLCHAIN) {
              for (uint64_t ip : f.callchain) {
                if (ip < static_cast<uint64_t>(PERF_CONTEXT_MAX)) chain.push_back(ip);
              }
            }
            if (so.json) {
              if (!first) buf.push_back(',');
              fmt::format_to(it,
                             "{{\"time\":{},\"cpu\":{},\"pid\":{},\"tid\":{},\"ip\":{},\"symbol\":",
                             f.time, has_cpu ? std::to_string(f.cpu) : "null", f.pid, f.tid, f.ip);
              AppendJsonString(buf, names.Name(f.ip));
              if (s.sample_type & PERF_SAMPLE_CALLCHAIN) {
                buf.append(std::string_view(",\"callchain\":["));
                for (size_t i = 0; i < chain.size(); ++i) {
                  fmt::format_to(it, "{}{{\"ip\":{},\"symbol\":", i ? "," : "", chain[i]);
                  AppendJsonString(buf, names.Name(chain[i]));
                  buf.push_back('}');
                }
                buf.push_back(']');
              }
              fmt::format_to(it,
                             ",\"snippet_bytes\":{},\"synced\":{},\"reaches_ip\":{},\"errors\":{},"
                             "\"instructions\":{},\"taken_branches\":{},\"branches\":[",
                             snippet.size(), flow.synced, flow.reached, flow.errors,
                             flow.insns.size(), flow.branches.size());
              for (size_t i = 0; i < last.size(); ++i) {
                fmt::format_to(it, "{}{{\"from\":{},\"to\":{},\"kind\":\"{}\",\"from_symbol\":",
                               i ? "," : "", last[i].from, last[i].to, last[i].kind);
                AppendJsonString(buf, names.Name(last[i].from));
                buf.append(std::string_view(",\"to_symbol\":"));
                AppendJsonString(buf, names.Name(last[i].to));
                buf.push_back('}');
              }
              buf.push_back(']');
              if (so.instructions) {
                buf.append(std::string_view(",\"insns\":["));
                for (size_t i = 0; i < flow.insns.size(); ++i) {
                  fmt::format_to(it, "{}{}", i ? "," : "", flow.insns[i]);
                }
                buf.push_back(']');
              }
              buf.push_back('}');
            } else {
              fmt::format_to(it, "sample time {} cpu {} pid {} tid {} ip {:#018x} {}\n", f.time,
                             has_cpu ? std::to_string(f.cpu) : "-", f.pid, f.tid, f.ip,
                             names.Name(f.ip));
              if (s.sample_type & PERF_SAMPLE_CALLCHAIN) {
                buf.append(std::string_view("  callchain:"));
                for (uint64_t ip : chain) fmt::format_to(it, " {:#x} {}", ip, names.Name(ip));
                buf.push_back('\n');
              }
              if (!flow.synced) {
                fmt::format_to(it,
                               "  snippet of {} bytes: no PSB to synchronise at (not decoded)\n",
                               snippet.size());
              } else {
                fmt::format_to(
                    it, "  snippet of {} bytes: {} instructions, {} taken branches{}{}\n",
                    snippet.size(), flow.insns.size(), flow.branches.size(),
                    flow.reached ? "" : ", does not reach the sampled IP",
                    flow.errors ? fmt::format(", {} decode errors (first: {})", flow.errors,
                                              DecodeErrorText(flow.first_error))
                                : "");
                for (const SampleBranch& b : last) {
                  fmt::format_to(it, "  {:#018x} {} -> {:#018x} {} ({})\n", b.from,
                                 names.Name(b.from), b.to, names.Name(b.to), b.kind);
                }
                if (so.instructions) {
                  for (uint64_t ip : flow.insns) {
                    fmt::format_to(it, "    insn {:#018x} {}\n", ip, names.Name(ip));
                  }
                }
              }
            }
            first = false;
            out.MaybeFlush();
            return absl::OkStatus();
          }));
  for (const std::string& w : r.warnings) warnings.push_back(w);
  if (so.folded) {
    for (const auto& [stack, n] : stacks) fmt::format_to(it, "{} {}\n", stack, n);
  } else if (so.stats) {
    AppendSampleStats(r.name, totals, functions, warnings, so.json, buf);
  } else if (so.json) {
    fmt::format_to(it,
                   "],\"totals\":{{\"samples\":{},\"unsynced\":{},\"not_reached\":{},"
                   "\"malformed\":{}}},\"warnings\":[",
                   totals.samples, totals.unsynced, totals.not_reached, totals.malformed);
    for (size_t i = 0; i < warnings.size(); ++i) {
      if (i) buf.push_back(',');
      AppendJsonString(buf, warnings[i]);
    }
    buf.append(std::string_view("]}\n"));
  } else {
    fmt::format_to(it, "{} samples: {} decoded to the sampled IP", totals.samples,
                   totals.samples - totals.unsynced - totals.not_reached);
    if (totals.unsynced) {
      fmt::format_to(it,
                     ", {} could not be synchronised (no PSB in the snippet: a larger "
                     "--aux-sample or a shorter psb_period helps)",
                     totals.unsynced);
    }
    if (totals.not_reached) {
      fmt::format_to(it, ", {} do not reach the sampled IP", totals.not_reached);
    }
    if (totals.malformed) fmt::format_to(it, ", {} malformed (skipped)", totals.malformed);
    buf.push_back('\n');
    for (const std::string& w : warnings) fmt::format_to(it, "warning: {}\n", w);
  }
  PTKIT_RETURN_IF_ERROR(out.Close());
  if (totals.samples == 0) {
    return absl::NotFoundError(fmt::format("{}: no AUX sample matches --tid / --cpu", r.name));
  }
  return totals;
}

}  // namespace ptkit::decoder
