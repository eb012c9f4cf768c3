#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "decoder/flow_sink.h"
#include "decoder/output_format.h"
#include "decoder/sinks.h"
#include "nlohmann/json.hpp"

namespace ptkit::decoder {
namespace {

class StatsSink : public FlowSink {
 public:
  StatsSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : FlowSink(image), out_(out), options_(options) {}
  void OnStream(const StreamInfo& stream) override {
    FlowSink::OnStream(stream);
    if (options_.list_problems && !stream.context_switch) stream_ = stream.name;
  }
  void OnError(const DecodeError& error) override {
    FlowSink::OnError(error);
    if (options_.list_problems) Problem([&](Buffer& b) { AppendErrorLine(b, error, false); });
  }
  void OnLoss(const LossInfo& loss) override {
    FlowSink::OnLoss(loss);
    if (options_.list_problems) Problem([&](Buffer& b) { AppendLossLine(b, loss, false); });
  }

 protected:
  absl::Status Report(const DecodeTotals& totals) override {
    // One row per function of a file, as perf report's default keys (comm, dso, sym) give for
    // a program that forks: the function's counts in every process (and program image) that
    // ran it are added up. --tid selects one thread's.
    auto image_name = [&](const Function& fn) {
      return fn.file < 0 ? std::string("[unmapped]") : fn.image->files()[fn.file].name;
    };
    std::vector<Function> rows;
    std::map<std::pair<std::string, std::string>, size_t> row_of;  // (image, name) -> row
    for (const Function& fn : functions_) {
      if (fn.self == 0 && fn.calls == 0) continue;
      auto [it, inserted] = row_of.try_emplace({image_name(fn), fn.name}, rows.size());
      if (inserted) {
        rows.push_back(fn);
        continue;
      }
      Function& row = rows[it->second];
      row.self += fn.self;
      row.inclusive += fn.inclusive;
      row.calls += fn.calls;
      row.address = std::min(row.address, fn.address);
    }
    std::vector<uint32_t> order(rows.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const Function& x = rows[a];
      const Function& y = rows[b];
      if (x.self != y.self) return x.self > y.self;
      if (x.inclusive != y.inclusive) return x.inclusive > y.inclusive;
      return x.name < y.name;
    });
    struct ImageTotals {
      uint64_t instructions = 0, calls = 0, functions = 0;
    };
    std::map<std::string, ImageTotals> images;
    for (const Function& fn : rows) {
      ImageTotals& t = images[image_name(fn)];
      t.instructions += fn.self;
      t.calls += fn.calls;
      ++t.functions;
    }
    Buffer& buf = out_.buf();
    auto it = out_.it();
    if (options_.json) {
      nlohmann::ordered_json doc;
      doc["schema"] = "ptkit-stats/1";
      doc["trace"] = options_.trace_name;
      doc["totals"] = {{"trace_bytes", totals.trace_bytes},
                       {"instructions", totals.instructions},
                       {"blocks", totals.blocks},
                       {"calls", calls_},
                       {"returns", returns_},
                       {"syncs", totals.syncs},
                       {"errors", totals.errors},
                       {"gaps", totals.gaps},
                       {"streams", totals.streams},
                       {"losses", totals.losses},
                       {"lost_bytes", totals.lost_bytes}};
      nlohmann::ordered_json errors = nlohmann::ordered_json::object();
      for (const auto& [code, count] : totals.errors_by_code) errors[IptErrorName(code)] = count;
      doc["errors"] = errors;
      nlohmann::ordered_json imgs = nlohmann::ordered_json::array();
      for (const auto& [name, t] : images) {
        imgs.push_back({{"image", name},
                        {"instructions", t.instructions},
                        {"calls", t.calls},
                        {"functions", t.functions}});
      }
      doc["images"] = imgs;
      nlohmann::ordered_json fns = nlohmann::ordered_json::array();
      for (uint32_t i : order) {
        const Function& fn = rows[i];
        fns.push_back({{"function", fn.name},
                       {"image", image_name(fn)},
                       {"address", fmt::format("{:#x}", fn.address)},
                       {"self", fn.self},
                       {"inclusive", fn.inclusive},
                       {"calls", fn.calls}});
      }
      doc["functions"] = fns;
      doc["warnings"] = totals.warnings;
      std::string text = doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
      buf.append(text);
      buf.push_back('\n');
      return out_.Close();
    }
    fmt::format_to(it, "# {}: {}, {}, {}, {}, {}, {} ({})\n", options_.trace_name,
                   Counted(totals.trace_bytes, "byte"), Counted(totals.instructions, "instruction"),
                   Counted(totals.blocks, "block"), Counted(calls_, "call"),
                   Counted(returns_, "return"), Counted(totals.errors, "error"),
                   Counted(totals.gaps, "gap"));
    for (const auto& [code, count] : totals.errors_by_code) {
      fmt::format_to(it, "# error {}: {}\n", IptErrorName(code), count);
    }
    for (const std::string& w : totals.warnings) fmt::format_to(it, "# warning: {}\n", w);
    if (totals.streams != 0 || totals.losses != 0) {
      fmt::format_to(it, "# {}, {}, {} lost\n", Counted(totals.streams, "stream"),
                     Counted(totals.losses, "loss point"), Counted(totals.lost_bytes, "byte"));
    }
    const double total = totals.instructions == 0 ? 1.0 : static_cast<double>(totals.instructions);
    fmt::format_to(it, "\n{:>12} {:>7} {:>12} {:>7} {:>9}  {}\n", "self", "self%", "inclusive",
                   "incl%", "calls", "function [image]");
    const size_t shown =
        options_.top_functions == 0 ? order.size() : std::min(order.size(), options_.top_functions);
    for (size_t k = 0; k < shown; ++k) {
      const Function& fn = rows[order[k]];
      // Code without a symbol is named "[image]" already: no second "[image]" after it.
      const std::string image = FileLabel(image_name(fn));
      fmt::format_to(it, "{:>12} {:>6.2f}% {:>12} {:>6.2f}% {:>9}  {}{}{}\n", fn.self,
                     100.0 * fn.self / total, fn.inclusive, 100.0 * fn.inclusive / total, fn.calls,
                     fn.name, fn.name == image ? "" : " ", fn.name == image ? "" : image);
      out_.MaybeFlush();
    }
    if (shown < order.size()) {
      fmt::format_to(it, "{:>12} ({} more functions: ptdecode stats shows them all)\n", "...",
                     order.size() - shown);
    }
    fmt::format_to(it, "\n{:>12} {:>7} {:>9} {:>9}  {}\n", "instructions", "%", "calls",
                   "functions", "image");
    for (const auto& [name, t] : images) {
      fmt::format_to(it, "{:>12} {:>6.2f}% {:>9} {:>9}  {}\n", t.instructions,
                     100.0 * t.instructions / total, t.calls, t.functions, name);
    }
    if (options_.list_problems) {
      fmt::format_to(
          it, "\nlosses and errors: {}\n",
          problems_count_ == 0 ? std::string("none") : fmt::format("{}", problems_count_));
      buf.append(std::string_view(problems_.data(), problems_.size()));
    }
    return out_.Close();
  }

 private:
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
};

}  // namespace

std::unique_ptr<Sink> MakeStatsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options) {
  return std::make_unique<StatsSink>(image, out, options);
}

}  // namespace ptkit::decoder
