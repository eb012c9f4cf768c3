#include "decoder/diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "decoder/output_format.h"
#include "decoder/sinks.h"
#include "nlohmann/json.hpp"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

using Key = std::pair<std::string, std::string>;  // (image file name, function name)

// "sub_ADDRESS" as the flow model names code without a symbol entered by a call.
bool IsAddressName(const std::string& name) {
  return name.size() > 4 && name.starts_with("sub_") &&
         std::all_of(name.begin() + 4, name.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

// A function's name for matching: code without a symbol by its offset from the nearest named
// function of the same image below it (addresses move between builds, offsets from a symbol
// less so), else by its own name.
std::string MatchName(const Profile& p, const ProfileFunction& fn) {
  if (!IsAddressName(fn.function)) return fn.function;
  const ProfileFunction* nearest = nullptr;
  for (const ProfileFunction& other : p.functions) {
    if (other.image != fn.image || other.address > fn.address || IsAddressName(other.function) ||
        other.function.starts_with('[')) {
      continue;
    }
    if (nearest == nullptr || other.address > nearest->address) nearest = &other;
  }
  if (nearest == nullptr) return fn.function;
  return fmt::format("{}+{:#x}", nearest->function, fn.address - nearest->address);
}

std::map<Key, DiffCounts> Keyed(const Profile& p) {
  std::map<Key, DiffCounts> out;
  for (const ProfileFunction& fn : p.functions) {
    DiffCounts& c = out[{std::string(Basename(fn.image)), MatchName(p, fn)}];
    c.self += fn.self;
    c.inclusive += fn.inclusive;
    c.calls += fn.calls;
  }
  return out;
}

uint64_t Median(std::vector<uint64_t> values) {
  std::sort(values.begin(), values.end());
  return values[(values.size() - 1) / 2];
}

uint64_t Metric(const DiffCounts& c, DiffMetric metric) {
  switch (metric) {
    case DiffMetric::kSelf:
      return c.self;
    case DiffMetric::kInclusive:
      return c.inclusive;
    case DiffMetric::kCalls:
      return c.calls;
  }
  return 0;
}

std::optional<double> Percent(uint64_t base, uint64_t now) {
  if (base == 0) return std::nullopt;
  return 100.0 * (static_cast<double>(now) - static_cast<double>(base)) / static_cast<double>(base);
}

DiffSide MakeSide(std::span<const Profile> runs, DiffMetric metric) {
  DiffSide side;
  std::vector<uint64_t> totals;
  for (const Profile& p : runs) {
    side.inputs.push_back(p.trace);
    totals.push_back(metric == DiffMetric::kCalls ? p.totals.calls : p.totals.instructions);
    if (p.totals.errors != 0 || p.totals.losses != 0) {
      side.incomplete.push_back(fmt::format(
          "{}: {}, {} ({} lost)", p.trace, Counted(p.totals.errors, "decode error"),
          Counted(p.totals.losses, "loss point"), Counted(p.totals.lost_bytes, "byte")));
    }
  }
  side.total = Median(std::move(totals));
  return side;
}

// Per key, the median of each count over the runs. Every key seen in a run gets an entry in
// `seen`, set to true when `base`.
std::map<Key, DiffCounts> MedianCounts(std::span<const Profile> runs, std::map<Key, bool>& seen,
                                       bool base) {
  std::vector<std::map<Key, DiffCounts>> keyed;
  for (const Profile& p : runs) keyed.push_back(Keyed(p));
  std::map<Key, DiffCounts> out;
  for (const auto& run : keyed) {
    for (const auto& [key, counts] : run) {
      if (out.contains(key)) continue;
      std::vector<uint64_t> self, inclusive, calls;
      for (const auto& r : keyed) {
        auto it = r.find(key);
        const DiffCounts c = it == r.end() ? DiffCounts{} : it->second;
        self.push_back(c.self);
        inclusive.push_back(c.inclusive);
        calls.push_back(c.calls);
      }
      out[key] = {Median(self), Median(inclusive), Median(calls)};
      seen[key] |= base;
    }
  }
  return out;
}

std::string Signed(int64_t v) { return v > 0 ? fmt::format("+{}", v) : fmt::format("{}", v); }

std::string PercentText(const std::optional<double>& pct) {
  if (!pct) return "-";
  return fmt::format("{:+.2f}%", *pct);
}

std::string ChangeText(const DiffRow& row) {
  if (!row.in_base) return "new";
  if (!row.in_new) return "removed";
  return PercentText(row.change_pct);
}

std::string Runs(const DiffSide& side) {
  std::string names = side.inputs[0];
  for (size_t i = 1; i < side.inputs.size(); ++i) names += ", " + side.inputs[i];
  if (side.inputs.size() == 1) return names;
  return fmt::format("{} ({} runs, medians)", names, side.inputs.size());
}

std::string TotalName(DiffMetric metric) {
  return metric == DiffMetric::kCalls ? "calls" : "instructions";
}

bool Shown(const DiffRow& row) { return row.change != 0 || row.in_base != row.in_new; }

std::string LimitsText(const DiffOptions& o) {
  std::vector<std::string> parts;
  if (o.fail_total_pct) parts.push_back(fmt::format("--fail-total {}%", *o.fail_total_pct));
  if (o.fail_function_pct) {
    parts.push_back(fmt::format("--fail-function {}% (--min-instructions {})", *o.fail_function_pct,
                                o.min_instructions));
  }
  if (o.fail_on_loss) parts.push_back("--fail-on-loss");
  if (parts.empty()) return "no limits given (--fail-total, --fail-function)";
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) out += ", " + parts[i];
  return out;
}

std::string Verdict(const DiffResult& d, const DiffOptions& o) {
  if (d.regression()) return fmt::format("REGRESSION beyond {}", LimitsText(o));
  if (!o.fail_total_pct && !o.fail_function_pct && !o.fail_on_loss)
    return "no limits given: nothing checked";
  return fmt::format("no regression beyond {}", LimitsText(o));
}

size_t CountIf(const DiffResult& d, bool (*pred)(const DiffRow&)) {
  return static_cast<size_t>(std::count_if(d.rows.begin(), d.rows.end(), pred));
}

std::string Summary(const DiffResult& d) {
  const size_t both = CountIf(d, [](const DiffRow& r) { return r.in_base && r.in_new; });
  const size_t added = CountIf(d, [](const DiffRow& r) { return !r.in_base; });
  const size_t removed = CountIf(d, [](const DiffRow& r) { return !r.in_new; });
  const size_t changed =
      CountIf(d, [](const DiffRow& r) { return r.in_base && r.in_new && r.change != 0; });
  return fmt::format("functions: {} in both ({} changed), {} new, {} removed", both, changed, added,
                     removed);
}

}  // namespace

const char* DiffMetricName(DiffMetric metric) {
  switch (metric) {
    case DiffMetric::kSelf:
      return "self";
    case DiffMetric::kInclusive:
      return "inclusive";
    case DiffMetric::kCalls:
      return "calls";
  }
  return "?";
}

absl::StatusOr<DiffResult> DiffProfiles(std::span<const Profile> base, std::span<const Profile> now,
                                        const DiffOptions& options) {
  if (base.empty() || now.empty()) {
    return absl::InvalidArgumentError("diff needs at least one run on each side (BASE and NEW)");
  }
  DiffResult d;
  d.metric = options.metric;
  d.base = MakeSide(base, options.metric);
  d.now = MakeSide(now, options.metric);
  std::map<Key, bool> in_base;
  std::map<Key, DiffCounts> b = MedianCounts(base, in_base, true);
  std::map<Key, DiffCounts> n = MedianCounts(now, in_base, false);
  size_t common = 0;
  for (const auto& [key, was_in_base] : in_base) {
    DiffRow row;
    row.image = key.first;
    row.function = key.second;
    row.in_base = was_in_base;
    row.in_new = n.contains(key);
    common += row.in_base && row.in_new;
    if (row.in_base) row.base = b[key];
    if (row.in_new) row.now = n[key];
    const uint64_t before = Metric(row.base, options.metric);
    const uint64_t after = Metric(row.now, options.metric);
    row.change = static_cast<int64_t>(after) - static_cast<int64_t>(before);
    row.change_pct = Percent(before, after);
    row.allowed =
        std::find(options.allow.begin(), options.allow.end(), row.function) != options.allow.end();
    if (options.fail_function_pct && row.in_base && row.in_new) {
      const DiffMetric size_metric =
          options.metric == DiffMetric::kCalls ? DiffMetric::kSelf : options.metric;
      row.checked = std::max(Metric(row.base, size_metric), Metric(row.now, size_metric)) >=
                    options.min_instructions;
      if (row.checked && !row.allowed && row.change_pct &&
          *row.change_pct > *options.fail_function_pct) {
        row.regression = true;
        d.reasons.push_back(fmt::format("{} [{}]: {} {} -> {} ({}) > --fail-function {}%",
                                        row.function, row.image, DiffMetricName(options.metric),
                                        before, after, PercentText(row.change_pct),
                                        *options.fail_function_pct));
      }
    }
    d.rows.push_back(std::move(row));
  }
  if (common == 0) {
    return absl::InvalidArgumentError(fmt::format(
        "{} and {} have no function in common (matched by image file name and function name): "
        "are they recordings of the same program?",
        d.base.inputs[0], d.now.inputs[0]));
  }
  std::stable_sort(d.rows.begin(), d.rows.end(), [](const DiffRow& x, const DiffRow& y) {
    const uint64_t ax = x.change < 0 ? -static_cast<uint64_t>(x.change) : x.change;
    const uint64_t ay = y.change < 0 ? -static_cast<uint64_t>(y.change) : y.change;
    return ax > ay;
  });
  d.total_change = static_cast<int64_t>(d.now.total) - static_cast<int64_t>(d.base.total);
  d.total_change_pct = Percent(d.base.total, d.now.total);
  if (options.fail_total_pct && d.total_change_pct &&
      *d.total_change_pct > *options.fail_total_pct) {
    d.total_regression = true;
    d.reasons.insert(d.reasons.begin(),
                     fmt::format("total {} {} -> {} ({}) > --fail-total {}%",
                                 TotalName(options.metric), d.base.total, d.now.total,
                                 PercentText(d.total_change_pct), *options.fail_total_pct));
  }
  if (options.fail_on_loss) {
    for (const DiffSide* side : {&d.base, &d.now}) {
      for (const std::string& why : side->incomplete) {
        d.reasons.push_back(fmt::format("{} (--fail-on-loss)", why));
      }
    }
  }
  return d;
}

std::string FormatDiffText(const DiffResult& d, const DiffOptions& o) {
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "# metric: {}; base: {}; new: {}\n", DiffMetricName(d.metric), Runs(d.base),
                 Runs(d.now));
  for (const DiffSide* side : {&d.base, &d.now}) {
    for (const std::string& why : side->incomplete) {
      fmt::format_to(it, "# warning: {} side incomplete: {}: counts may not be comparable\n",
                     side == &d.base ? "base" : "new", why);
    }
  }
  fmt::format_to(it, "# total {}: {} -> {} ({}, {})\n", TotalName(d.metric), d.base.total,
                 d.now.total, Signed(d.total_change), PercentText(d.total_change_pct));
  fmt::format_to(it, "# {}\n", Summary(d));
  fmt::format_to(it, "\n{:>12} {:>12} {:>12} {:>9}  {}\n", "base", "new", "change", "change%",
                 "function [image]");
  size_t shown = 0;
  for (const DiffRow& r : d.rows) {
    if (!Shown(r)) continue;
    ++shown;
    fmt::format_to(it, "{:>12} {:>12} {:>12} {:>9}  {} [{}]{}\n", Metric(r.base, d.metric),
                   Metric(r.now, d.metric), Signed(r.change), ChangeText(r), r.function, r.image,
                   r.regression ? "  REGRESSION" : (r.allowed ? "  (allowed)" : ""));
  }
  if (shown == 0) fmt::format_to(it, "{:>12}  (no function changed)\n", "");
  fmt::format_to(it, "\n{}\n", Verdict(d, o));
  for (const std::string& reason : d.reasons) fmt::format_to(it, "  {}\n", reason);
  return out;
}

std::string FormatDiffMarkdown(const DiffResult& d, const DiffOptions& o) {
  auto cell = [](std::string s) {  // a table cell: '|' would end it
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "### ptdecode diff: {}\n\n", d.regression() ? "regression" : "no regression");
  fmt::format_to(it, "Metric **{}**; base `{}`, new `{}`.\n\n", DiffMetricName(d.metric),
                 Runs(d.base), Runs(d.now));
  for (const DiffSide* side : {&d.base, &d.now}) {
    for (const std::string& why : side->incomplete) {
      fmt::format_to(it, "> **Warning**: {} side incomplete: {}: counts may not be comparable.\n\n",
                     side == &d.base ? "base" : "new", cell(why));
    }
  }
  fmt::format_to(it, "Total {}: {} → {} ({}, {}). {}.\n\n", TotalName(d.metric), d.base.total,
                 d.now.total, Signed(d.total_change), PercentText(d.total_change_pct), Summary(d));
  fmt::format_to(it, "| function | image | base | new | change | change % |\n");
  fmt::format_to(it, "|:--|:--|--:|--:|--:|--:|\n");
  size_t shown = 0;
  for (const DiffRow& r : d.rows) {
    if (!Shown(r)) continue;
    ++shown;
    fmt::format_to(it, "| `{}`{} | {} | {} | {} | {} | {} |\n", cell(r.function),
                   r.regression ? " **regression**" : (r.allowed ? " (allowed)" : ""),
                   cell(r.image), Metric(r.base, d.metric), Metric(r.now, d.metric),
                   Signed(r.change), ChangeText(r));
  }
  if (shown == 0) fmt::format_to(it, "| (no function changed) | | | | | |\n");
  fmt::format_to(it, "\n{}.\n", Verdict(d, o));
  for (const std::string& reason : d.reasons) fmt::format_to(it, "- {}\n", cell(reason));
  return out;
}

std::string FormatDiffJson(const DiffResult& d, const DiffOptions& o) {
  using Json = nlohmann::ordered_json;
  auto pct = [](const std::optional<double>& p) { return p ? Json(*p) : Json(nullptr); };
  auto side = [](const DiffSide& s) {
    return Json{{"inputs", s.inputs}, {"total", s.total}, {"incomplete", s.incomplete}};
  };
  auto counts = [](const DiffCounts& c) {
    return Json{{"self", c.self}, {"inclusive", c.inclusive}, {"calls", c.calls}};
  };
  Json doc;
  doc["schema"] = "ptkit-diff/1";
  doc["metric"] = DiffMetricName(d.metric);
  doc["base"] = side(d.base);
  doc["new"] = side(d.now);
  doc["total"] = {{"base", d.base.total},
                  {"new", d.now.total},
                  {"change", d.total_change},
                  {"change_pct", pct(d.total_change_pct)},
                  {"regression", d.total_regression}};
  doc["limits"] = {{"fail_total_pct", o.fail_total_pct ? Json(*o.fail_total_pct) : Json()},
                   {"fail_function_pct", o.fail_function_pct ? Json(*o.fail_function_pct) : Json()},
                   {"min_instructions", o.min_instructions},
                   {"allow", o.allow},
                   {"fail_on_loss", o.fail_on_loss}};
  Json rows = Json::array();
  for (const DiffRow& r : d.rows) {
    rows.push_back({{"function", r.function},
                    {"image", r.image},
                    {"status", !r.in_base  ? "new"
                               : !r.in_new ? "removed"
                               : r.change  ? "changed"
                                           : "same"},
                    {"base", r.in_base ? counts(r.base) : Json()},
                    {"new", r.in_new ? counts(r.now) : Json()},
                    {"change", r.change},
                    {"change_pct", pct(r.change_pct)},
                    {"checked", r.checked},
                    {"allowed", r.allowed},
                    {"regression", r.regression}});
  }
  doc["functions"] = rows;
  doc["regressions"] = d.reasons;
  doc["regression"] = d.regression();
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

absl::StatusOr<Profile> LoadProfile(const std::string& path, const ContainerOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(errno, "open ", path);
  char first = 0;
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  if (first == '{') {
    std::ostringstream text;
    text << first << in.rdbuf();
    auto profile = ProfileFromJson(text.str());
    if (!profile.ok()) {
      return absl::Status(profile.status().code(),
                          fmt::format("{}: {}", path, std::string(profile.status().message())));
    }
    return profile;
  }
  in.close();
  PTKIT_ASSIGN_OR_RETURN(auto empty, ProgramImage::Create());
  OutputOptions output;
  output.trace_name = path;
  Profile profile;
  auto sink = MakeProfileSink(*empty, output, &profile);
  PTKIT_ASSIGN_OR_RETURN(DecodeTotals totals, DecodeContainer(path, options, *sink));
  if (totals.instructions == 0) {
    return absl::FailedPreconditionError(
        fmt::format("{}: no instructions decoded ({}, {} of trace, {}, {})", path,
                    Counted(totals.streams, "stream"), Counted(totals.trace_bytes, "byte"),
                    Counted(totals.errors, "decode error"), Counted(totals.losses, "loss point")));
  }
  return profile;
}

}  // namespace ptkit::decoder
