#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "decoder/disassembler.h"
#include "decoder/flow_sink.h"
#include "decoder/output_format.h"
#include "decoder/profile.h"
#include "decoder/scoped_counts.h"
#include "decoder/sinks.h"
#include "decoder/srcline.h"
#include "decoder/tick_splitter.h"

namespace ptkit::decoder {
namespace {

// The most bytes of a function ProfileFunction::code hashes.
constexpr uint64_t kMaxCodeBytes = uint64_t{1} << 20;

class StatsSink : public FlowSink {
 public:
  // A chunk's counts are the model's (what a chunk cannot tell, time and the list of problems
  // in order, are not summarised; --exclude-startup neither: such a stats decodes on one thread
  // with the fast decoder, which outruns -j's per-chunk records of every block).
  class Chunk : public FlowChunk {
   public:
    Chunk(const ProgramImage& image, StatsSink& to) : FlowChunk(image, to.wants_time()), to_(to) {
      model_.set_tell_counts(false);  // nothing here listens to counts
    }
    bool ApplyTo() override { return to_.ApplyChunkModel(model_); }

   private:
    StatsSink& to_;
  };
  std::unique_ptr<ChunkSummary> NewChunkSummary(const ProgramImage& image) override {
    if (scoped_ || options_.list_problems || wants_time_) return nullptr;
    return std::make_unique<Chunk>(image, *this);
  }

  // Prints the report to `out`, or with `profile_out` stores the profile there instead.
  // With `timing`, each function's self time too (Profile::timing), split as TickSplitter says.
  StatsSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options,
            Profile* profile_out = nullptr, const ProfileSinkOptions& extra = {})
      : FlowSink(image), out_(out), options_(options), profile_out_(profile_out), extra_(extra) {
    wants_time_ = extra.timing;
    if (!extra.only_under.empty()) scoped_.emplace(extra.only_under, functions_);
    model_.set_tell_counts(scoped_.has_value() || wants_time_);  // what OnCount serves
  }
  bool follows_outside_window() const override { return true; }
  // The time outside a --time window is not the window's.
  void OnWindow(bool in) override {
    FlowSink::OnWindow(in);
    if (scoped_) scoped_->set_counting(in);
    if (wants_time_) ForgetTime();
    ticks_.Drop();
  }
  void OnTime(uint64_t now) override {
    if (wants_time_) ticks_.OnTime(timed(), tsc(), now);
    FlowSink::OnTime(now);
  }
  // The time that passes while tracing is stopped in the kernel (a system call's wait) is the
  // function's on top, not the instructions' before the disable that share its time (sweep
  // 40a F2); the decoder tells an enabled event's time before the event.
  void OnEvent(const pt_event& event) override {
    FlowSink::OnEvent(event);
    if (event.type == ptev_disabled || event.type == ptev_async_disabled) {
      if (model_.stopped_in_kernel()) ticks_.OnDisabled();
    } else if (event.type == ptev_enabled) {
      ticks_.OnEnabled();
    }
  }
  void OnStream(const StreamInfo& stream) override {
    FlowSink::OnStream(stream);
    // Under main: a thread of the process other than its first counts whole (ScopedCounts),
    // until it execs (sweep 36b F1: the exec'd program's start-up counted), and so does a
    // forked process until it execs (sweep 33b F1: a worker forked below main that _exits
    // never returns into it: diff saw none of its work, a doubled worker "no change").
    if (scoped_) {
      scoped_->OnThread(stream.pid,
                        scoped_->root() == "main" && stream.tid != 0 && stream.pid != 0 &&
                            ((stream.tid != stream.pid && !stream.exec_leader) || stream.forked));
    }
    if (!stream.context_switch) ticks_.Restart();
    if (options_.list_problems && !stream.context_switch) stream_ = stream.name;
  }
  void OnError(const DecodeError& error) override {
    FlowSink::OnError(error);
    if (wants_time_) ForgetTime();  // the time across an error is not the program's
    ticks_.Restart();
    if (options_.list_problems) Problem([&](Buffer& b) { AppendErrorLine(b, error, false); });
  }
  void OnLoss(const LossInfo& loss) override {
    FlowSink::OnLoss(loss);
    ticks_.Restart();
    if (options_.list_problems) Problem([&](Buffer& b) { AppendLossLine(b, loss, false); });
  }

 protected:
  void OnCount(uint32_t function, uint64_t n) override {
    if (scoped_) scoped_->OnCount(function, n);
    if (!wants_time_) return;
    if (!scoped_ || scoped_->active()) {
      ticks_.OnCount(function, n);
    } else {
      ticks_.OnOutside(n);  // its share of the interval is not the counted code's
    }
  }
  void OnEnter(const Frame& frame) override {
    if (scoped_) scoped_->OnEnter(frame);
  }
  void OnUncall(const Frame& frame) override {
    if (scoped_) scoped_->OnUncall(frame);
  }
  void OnRename(uint32_t from, const Frame& frame) override {
    if (scoped_) scoped_->OnRename(from, frame);
  }
  void OnExit(const Frame& frame, bool at_end) override {
    if (scoped_) {
      scoped_->OnExit(frame, returns_ - returns_told_);
      returns_told_ = returns_;
    }
  }
  std::string EmptyResult() const override { return empty_; }
  absl::Status Report(const DecodeTotals& totals) override {
    // Nothing under --only-under F is an empty result, said on stderr (exit 1) too.
    if (scoped_ && scoped_->instructions() == 0 && totals.instructions != 0) {
      empty_ = ScopedWarning(totals);
    }
    Profile profile = MakeProfile(totals);
    if (profile_out_ != nullptr) {
      *profile_out_ = std::move(profile);
      return absl::OkStatus();
    }
    Buffer& buf = out_.buf();
    if (options_.json) {
      buf.append(ProfileToJson(profile));
      return out_.Close();
    }
    auto it = out_.it();
    const ProfileTotals& t = profile.totals;
    fmt::format_to(it, "# {}: {}, {}, {}, {}, {}, {} ({})\n", profile.trace,
                   Counted(t.trace_bytes, "byte"), Counted(t.instructions, "instruction"),
                   Counted(t.blocks, "block"), Counted(t.calls, "call"),
                   Counted(t.returns, "return"), Counted(t.errors, "error"),
                   Counted(t.gaps, "gap"));
    for (const auto& [name, count] : profile.errors) {
      fmt::format_to(it, "# error {}: {}\n", name, count);
    }
    for (const std::string& w : profile.warnings) fmt::format_to(it, "# warning: {}\n", w);
    if (t.streams != 0 || t.losses != 0) {
      fmt::format_to(it, "# {}, {}, {} lost{}\n", Counted(t.streams, "stream"),
                     Counted(t.losses, "loss point"), Counted(t.lost_bytes, "byte"),
                     UnknownSizeLosses(t.unknown_size_losses));
    }
    const double total = t.instructions == 0 ? 1.0 : static_cast<double>(t.instructions);
    fmt::format_to(it, "\n{:>12} {:>7} {:>12} {:>7} {:>9}  {}\n", "self", "self%", "inclusive",
                   "incl%", "calls", "function [image]");
    const std::vector<ProfileFunction>& rows = profile.functions;
    const size_t shown =
        options_.top_functions == 0 ? rows.size() : std::min(rows.size(), options_.top_functions);
    for (size_t k = 0; k < shown; ++k) {
      const ProfileFunction& fn = rows[k];
      // Code without a symbol is named "[image]" already: no second "[image]" after it.
      const std::string image = FileLabel(fn.image);
      const bool named_by_image = fn.function == image;
      fmt::format_to(it, "{:>12} {:>6.2f}% {:>12} {:>6.2f}% {:>9}  {}{}{}\n", fn.self,
                     100.0 * fn.self / total, fn.inclusive, 100.0 * fn.inclusive / total, fn.calls,
                     fn.function, named_by_image ? "" : " ", named_by_image ? "" : image);
      out_.MaybeFlush();
    }
    if (shown < rows.size()) {
      fmt::format_to(it, "{:>12} ({} more functions: ptdecode stats shows them all)\n", "...",
                     rows.size() - shown);
    }
    fmt::format_to(it, "\n{:>12} {:>7} {:>9} {:>9}  {}\n", "instructions", "%", "calls",
                   "functions", "image");
    for (const ProfileImage& image : profile.images) {
      fmt::format_to(it, "{:>12} {:>6.2f}% {:>9} {:>9}  {}\n", image.instructions,
                     100.0 * image.instructions / total, image.calls, image.functions, image.image);
    }
    if (options_.list_problems) {
      // (The recording's and the decode's warnings are the header's "# warning:" lines.)
      // Losses outside the decoded streams (snapshot mode's) are warnings, not listed here
      // (sweep 30a F7: "none" under "3 loss points").
      const uint64_t listed = problems_count_, all = totals.losses + totals.errors;
      fmt::format_to(it, "\nlosses and errors: {}{}\n",
                     listed == 0 && all == 0 ? std::string("none")
                     : listed == 0 ? fmt::format("none in the decoded streams ({} outside them)",
                                                 Counted(totals.losses, "loss point"))
                                   : fmt::format("{}", listed),
                     totals.warnings.empty()
                         ? std::string()
                         : fmt::format("; {} warning{} (above)", totals.warnings.size(),
                                       totals.warnings.size() == 1 ? "" : "s"));
      buf.append(std::string_view(problems_.data(), problems_.size()));
    }
    return out_.Close();
  }

 private:
  // One row per function of a file, as perf report's default keys (comm, dso, sym) give for
  // a program that forks: the function's counts in every process (and program image) that
  // ran it are added up. --tid selects one thread's.
  // What --only-under counted of the decode, and why nothing where it counted nothing.
  std::string ScopedWarning(const DecodeTotals& totals) const {
    return fmt::format("only what ran under {} is counted: {} of {}{}", scoped_->root(),
                       Counted(scoped_->instructions(), "instruction"), totals.instructions,
                       scoped_->root_seen()
                           ? ""
                           : RootNotTracedReason(scoped_->root(), totals.warnings, totals.losses));
  }
  Profile MakeProfile(const DecodeTotals& totals) const {
    Profile p;
    p.trace = options_.trace_name;
    p.totals = {
        totals.trace_bytes, totals.instructions, totals.blocks,     calls_,
        returns_,           totals.syncs,        totals.errors,     totals.gaps,
        totals.streams,     totals.losses,       totals.lost_bytes, totals.unknown_size_losses};
    for (const auto& [code, count] : totals.errors_by_code) {
      p.errors.emplace_back(IptErrorName(code), count);
    }
    p.warnings = totals.warnings;
    p.totals.input_warnings = totals.warnings.size();
    if (scoped_) {
      p.warnings.push_back(ScopedWarning(totals));
      p.totals.instructions = scoped_->instructions();
      p.totals.calls = scoped_->calls();
      p.totals.returns = scoped_->returns();
      p.only_under = scoped_->root();
    }
    if (wants_time_ && ticks_.timed()) {
      p.timing = ProfileTiming{options_.clock.tsc_hz};
      p.timing->all_ticks = ticks_.all_ticks();
    }
    std::optional<SourceLines> lines;
    p.source_files = extra_.source_files;
    // Rows are keyed by (image, name, address in the file): two functions of one name in a
    // file (static functions of two sources) are two rows, as perf report's sym key gives
    // them, and the same function in every process and program image that ran it is one (the
    // address in the file does not move with ASLR). A function whose address the image cannot
    // place in its file (overlapping mappings) joins the row of its name with the lowest
    // address, after every placed one: the rows do not depend on the order the decode met them.
    using RowKey = std::tuple<std::string, std::string, uint64_t>;
    std::map<RowKey, size_t> row_of;
    std::vector<const Function*> first_of_row;  // per row of p.functions
    std::vector<uint32_t> unplaced;
    const auto add = [&](uint32_t i, const ScopedCounts::Counts& c, uint64_t ticks, RowKey key) {
      const Function& fn = functions_[i];
      auto [it, inserted] = row_of.try_emplace(key, p.functions.size());
      if (inserted) {
        p.functions.push_back(
            {fn.name, std::get<0>(key), fn.address, c.self, c.inclusive, c.calls, ticks});
        first_of_row.push_back(&fn);
        return;
      }
      ProfileFunction& row = p.functions[it->second];
      row.self += c.self;
      row.inclusive += c.inclusive;
      row.calls += c.calls;
      row.ticks += ticks;
      row.address = std::min(row.address, fn.address);
    };
    const auto counts = [&](uint32_t i) {
      const Function& fn = functions_[i];
      return scoped_ ? scoped_->counts(i) : ScopedCounts::Counts{fn.self, fn.inclusive, fn.calls};
    };
    const auto image_name = [&](const Function& fn) {
      return fn.file < 0 ? std::string("[unmapped]") : fn.image->files()[fn.file].name;
    };
    for (uint32_t i = 0; i < functions_.size(); ++i) {
      const Function& fn = functions_[i];
      const ScopedCounts::Counts c = counts(i);
      const uint64_t ticks = ticks_.ticks(i);
      if (p.timing) p.timing->ticks += ticks;
      // (A function whose frame held the whole --time window ran none of its own: its
      // inclusive count keeps its row; sweep 39b F2.)
      if (c.self == 0 && c.calls == 0 && c.inclusive == 0 && ticks == 0) continue;
      std::optional<uint64_t> in_file = 0;
      if (fn.file >= 0 && fn.address != 0) in_file = fn.image->LinkAddress(fn.address);
      if (!in_file) {
        unplaced.push_back(i);
        continue;
      }
      add(i, c, ticks, {image_name(fn), fn.name, *in_file});
    }
    for (uint32_t i : unplaced) {
      const Function& fn = functions_[i];
      std::string image = image_name(fn);
      auto it = row_of.lower_bound({image, fn.name, 0});
      const bool named = it != row_of.end() && std::get<0>(it->first) == image &&
                         std::get<1>(it->first) == fn.name;
      add(i, counts(i), ticks_.ticks(i), named ? it->first : RowKey{image, fn.name, 0});
    }
    // Each row's source file: with source files, every row's; without, those of the functions
    // whose name (or whose clones' name, CloneBase) another function of their file has (`diff`
    // tells two static functions of one name apart by it).
    // Shared by the symbol table, not only by the rows: a run that ran one of two `helper`s
    // names it by its source too, as the run that ran both does (a review of 464a889).
    std::map<const ProgramImage*, std::set<std::pair<uint32_t, std::string_view>>> shared;
    const auto ambiguous = [&](const Function& fn) {
      auto [it, added] = shared.try_emplace(fn.image);
      if (added) {
        std::map<std::pair<uint32_t, std::string_view>, uint64_t> first;  // -> its address
        for (const Symbol& s : fn.image->symbols()) {
          auto [f, fresh] = first.try_emplace({s.image, CloneBase(s.name)}, s.begin);
          if (!fresh && f->second != s.begin) it->second.insert(f->first);
        }
      }
      return it->second.contains({static_cast<uint32_t>(fn.file), CloneBase(fn.name)});
    };
    for (size_t row = 0; row < p.functions.size(); ++row) {
      ProfileFunction& out = p.functions[row];
      const Function& fn = *first_of_row[row];
      if (fn.file < 0 || (!extra_.source_files && !ambiguous(fn))) continue;
      if (!lines) lines.emplace(nullptr);
      const std::string* at = lines->FunctionSource(*fn.image, fn.address);
      if (at != nullptr) out.source = *at;
    }
    // The code of each function the compiler numbered ("{lambda(int)#2}"), for diff.
    std::optional<Disassembler> disasm;
    for (size_t row = 0; row < p.functions.size(); ++row) {
      ProfileFunction& out = p.functions[row];
      const Function& fn = *first_of_row[row];
      if (fn.file < 0 || OrdinalBase(out.function) == out.function) continue;
      const int s = fn.image->SymbolAt(fn.address);
      if (s < 0) continue;
      const Symbol& symbol = fn.image->symbols()[static_cast<size_t>(s)];
      std::vector<uint8_t> code(std::min<uint64_t>(symbol.end - symbol.begin, kMaxCodeBytes));
      if (code.empty() || fn.image->Read(symbol.begin, code.data(), code.size()) != code.size()) {
        continue;
      }
      if (!disasm) disasm.emplace();
      out.code = fmt::format("{:016x}",
                             disasm->ShapeHash(ptem_64bit, code.data(), code.size(), symbol.begin));
    }
    SortProfile(p);
    return p;
  }

  // One line "  STREAM: [what]" of the losses and errors list.
  template <typename F>
  void Problem(F append) {
    ++problems_count_;
    fmt::format_to(std::back_inserter(problems_), "  {}{}", stream_, stream_.empty() ? "" : ": ");
    append(problems_);
  }

  Output out_;
  OutputOptions options_;
  std::string stream_;  // the current stream's name (container input)
  Buffer problems_;     // list_problems: the lines, in trace order
  uint64_t problems_count_ = 0;
  Profile* profile_out_;
  ProfileSinkOptions extra_;
  TickSplitter ticks_;                  // with timing
  std::optional<ScopedCounts> scoped_;  // with only_under
  uint64_t returns_told_ = 0;           // the model's returns when scoped_ last heard
  std::string empty_;                   // EmptyResult()
};

}  // namespace

std::string RootNotTracedReason(std::string_view root,
                                const std::vector<std::string>& input_warnings, uint64_t losses) {
  if (input_warnings.empty() && losses == 0) {
    return ": no call to a function of that name was traced (is the program stripped of its "
           "symbols, or the name misspelt?)";
  }
  return fmt::format(
      ": no call to a function of that name was traced, and the input is incomplete ({}): the "
      "trace may end before {} was called",
      input_warnings.empty() ? Counted(losses, "loss point")
                             : Counted(input_warnings.size(), "warning"),
      root);
}

std::unique_ptr<Sink> MakeStatsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options) {
  // The JSON document has what `diff` needs of a side: time and source files too.
  ProfileSinkOptions extra;
  extra.timing = options.json;
  extra.source_files = options.json;
  extra.only_under = options.only_under;
  return std::make_unique<StatsSink>(image, out, options, nullptr, extra);
}

std::unique_ptr<Sink> MakeProfileSink(const ProgramImage& image, const OutputOptions& options,
                                      Profile* profile, const ProfileSinkOptions& extra) {
  return std::make_unique<StatsSink>(image, nullptr, options, profile, extra);
}

}  // namespace ptkit::decoder
