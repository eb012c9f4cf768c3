#include "decoder/diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "decoder/ipt_handles.h"
#include "decoder/output_format.h"
#include "decoder/progress.h"
#include "decoder/recording.h"
#include "decoder/sinks.h"
#include "decoder/trace_config.h"
#include "decoder/tsc_clock.h"
#include "nlohmann/json.hpp"
#include "ptkit/numbers.h"
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
// A profile's (image, function) names: what CloneBase asks of a bare NAME.cold.
using Names = std::set<std::pair<std::string_view, std::string_view>>;
Names NamesOf(const Profile& p) {
  Names out;
  for (const ProfileFunction& fn : p.functions) out.emplace(fn.image, fn.function);
  return out;
}

std::string MatchName(const Profile& p, const ProfileFunction& fn, const Names& names) {
  if (!IsAddressName(fn.function)) {
    return std::string(CloneBase(fn.function, [&](std::string_view base) {
      return names.contains({fn.image, base});
    }));
  }
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

// Whether a row's name is MatchName's offset form ("main+0x1a0"): code without a symbol, matched
// between the sides by where it lies, which a change of the code before it moves.
bool ByOffset(const std::string& name) {
  const size_t at = name.rfind("+0x");
  return at != std::string::npos && at + 3 < name.size() &&
         std::all_of(name.begin() + static_cast<std::ptrdiff_t>(at) + 3, name.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

bool Timed(DiffMetric metric) { return metric == DiffMetric::kTime || metric == DiffMetric::kIpc; }

double NsPerTick(const Profile& p) { return p.timing ? 1e9 / p.timing->tsc_hz : 0; }
double CyclesPerTick(const Profile& p) {
  return p.timing && p.timing->ticks != 0
             ? static_cast<double>(p.timing->cycles) / static_cast<double>(p.timing->ticks)
             : 0;
}

// A row's name in `group` (the key's second half).
std::string GroupName(const Profile& p, const ProfileFunction& fn, DiffGroup group,
                      const Names& names) {
  switch (group) {
    case DiffGroup::kImage:
      return std::string(Basename(fn.image));
    case DiffGroup::kSourceFile:
      return fn.source.empty() ? std::string("[no line info]") : std::string(Basename(fn.source));
    case DiffGroup::kFunction:
      break;
  }
  return MatchName(p, fn, names);
}

// The names that stand for several functions of one image (static functions of two sources):
// a name whose rows in one run have two source files (the profile sink looks a row's source up
// where its file's symbols share its name; a stats --json document has it on every row). Each
// source is labelled by its path's last parts, as few as tell apart the sources that one run
// has ("util.c", or "x/util.c" and "y/util.c": sweep 34b F4 merged those two), the same number
// for every run of both sides, so that a run that ran one of them names it as a run that ran
// both does, and the same file of two checkouts ("/ci/base/app.c", "/ci/new/app.c"), never in
// one run, is one function (sweep 40b H1: every function of two documents was a removed and a
// new row, and no regression failed). A function and its clones (CloneBase) have one source.
using SharedNames = std::map<Key, std::map<std::string, std::string>>;
SharedNames FindSharedNames(std::span<const Profile> base, std::span<const Profile> now,
                            const DiffOptions& options) {
  SharedNames out;
  if (options.group_by != DiffGroup::kFunction) return out;
  // Per (image, name): the sources of each run that has any.
  std::map<Key, std::vector<std::set<std::string>>> sources;
  for (std::span<const Profile> side : {base, now}) {
    for (const Profile& p : side) {
      const Names names = NamesOf(p);
      std::map<Key, std::set<std::string>> run;
      for (const ProfileFunction& fn : p.functions) {
        if (!fn.source.empty())
          run[Key(Basename(fn.image), MatchName(p, fn, names))].insert(fn.source);
      }
      for (auto& [key, paths] : run) sources[key].push_back(std::move(paths));
    }
  }
  // The last `parts` parts of `path` ("x/util.c" for 2), or all of it.
  auto tail = [](std::string_view path, size_t parts) {
    size_t at = path.size();
    while (parts-- > 0 && at != std::string_view::npos && at > 0) at = path.rfind('/', at - 1);
    return at == std::string_view::npos ? path : path.substr(at + 1);
  };
  for (const auto& [key, runs] : sources) {
    if (std::none_of(runs.begin(), runs.end(), [](const auto& r) { return r.size() >= 2; })) {
      continue;
    }
    // The fewest parts that tell apart the sources of every run. (At most one part per '/' and
    // the whole path: "/src/a.c" and "src/a.c" end alike in every part, told apart only whole;
    // a review found it looping for ever.)
    size_t most = 1;
    for (const auto& r : runs) {
      for (const std::string& path : r) {
        most = std::max(most, static_cast<size_t>(std::count(path.begin(), path.end(), '/')) + 1);
      }
    }
    size_t parts = 1;
    for (; parts < most; ++parts) {
      const bool distinct = std::all_of(runs.begin(), runs.end(), [&](const auto& r) {
        std::set<std::string_view> labels;
        for (const std::string& path : r) labels.insert(tail(path, parts));
        return labels.size() == r.size();
      });
      if (distinct) break;
    }
    std::map<std::string, std::string>& labels = out[key];
    for (const auto& r : runs) {
      for (const std::string& path : r) {
        labels[path] = parts < most ? std::string(tail(path, parts)) : path;
      }
    }
  }
  return out;
}

// Functions the compiler numbers in the order of the source (OrdinalBase: lambdas), paired
// between the sides by their code (ProfileFunction::code): a lambda added before others
// renumbers them, and pairing by name compared each with its neighbour's code (sweep 34b F3:
// +1942% and +133% "regressions" of code that did not change). Per image and name without the
// numbers, the functions of each side in the order of their numbers are aligned by their code
// (the longest common subsequence), and where the rows between two pairs are as many on each
// side, those pair in order (a lambda whose code changed). Gives the base's names that change:
// to the new name of its pair, or, where a function of the base has no pair and the new side
// has its name, that name and " (base build)". `notes` gets each pair renamed.
std::map<Key, std::string> PairByCode(std::span<const Profile> base, std::span<const Profile> now,
                                      std::vector<std::string>& notes) {
  // Per (image, OrdinalBase): each name's numbers and code ("" where a run has none).
  struct Numbered {
    std::vector<uint64_t> ordinals;
    std::string name, code;
  };
  using Groups = std::map<Key, std::map<std::string, Numbered>>;
  auto collect = [](std::span<const Profile> side) {
    Groups out;
    for (const Profile& p : side) {
      for (const ProfileFunction& fn : p.functions) {
        std::vector<uint64_t> ordinals;
        // (Clones too: apply<{lambda(int)#2}> [clone .constprop.0] may be #1 and no clone.)
        std::string base = OrdinalBase(CloneBase(fn.function), &ordinals);
        if (ordinals.empty()) continue;
        auto& named = out[Key(Basename(fn.image), std::move(base))];
        auto [it, added] = named.try_emplace(fn.function, Numbered{ordinals, fn.function, fn.code});
        if (!added && it->second.code != fn.code) it->second.code.clear();
      }
    }
    return out;
  };
  const Groups b = collect(base), n = collect(now);
  std::map<Key, std::string> renamed;
  constexpr size_t kMostPerGroup = 1000;  // the alignment is quadratic
  for (const auto& [group, base_names] : b) {
    auto other = n.find(group);
    if (other == n.end()) continue;
    std::vector<const Numbered*> x, y;
    for (const auto& [name, f] : base_names) x.push_back(&f);
    for (const auto& [name, f] : other->second) y.push_back(&f);
    auto by_number = [](const Numbered* l, const Numbered* r) {
      return std::tie(l->ordinals, l->name) < std::tie(r->ordinals, r->name);
    };
    std::sort(x.begin(), x.end(), by_number);
    std::sort(y.begin(), y.end(), by_number);
    auto known = [](const Numbered* f) { return !f->code.empty(); };
    if (!std::all_of(x.begin(), x.end(), known) || !std::all_of(y.begin(), y.end(), known) ||
        x.size() > kMostPerGroup || y.size() > kMostPerGroup) {
      continue;
    }
    // lcs[i][j]: the longest common subsequence of x[i..] and y[j..] by code.
    std::vector<std::vector<uint32_t>> lcs(x.size() + 1, std::vector<uint32_t>(y.size() + 1));
    for (size_t i = x.size(); i-- > 0;) {
      for (size_t j = y.size(); j-- > 0;) {
        lcs[i][j] = x[i]->code == y[j]->code ? lcs[i + 1][j + 1] + 1
                                             : std::max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    // No code in common: each changed, pairs by name as functions do.
    if (lcs[0][0] == 0) continue;
    std::vector<std::pair<size_t, size_t>> pairs;
    size_t gap_x = 0, gap_y = 0;  // where the rows since the last pair begin
    auto pair_gap = [&](size_t end_x, size_t end_y) {
      if (end_x - gap_x != end_y - gap_y) return;
      for (size_t k = 0; gap_x + k < end_x; ++k) pairs.emplace_back(gap_x + k, gap_y + k);
    };
    for (size_t i = 0, j = 0; i < x.size() && j < y.size();) {
      if (x[i]->code == y[j]->code && lcs[i][j] == lcs[i + 1][j + 1] + 1) {
        pair_gap(i, j);
        pairs.emplace_back(i, j);
        gap_x = ++i;
        gap_y = ++j;
      } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
        ++i;
      } else {
        ++j;
      }
    }
    pair_gap(x.size(), y.size());
    std::vector<bool> paired(x.size());
    for (auto [i, j] : pairs) {
      paired[i] = true;
      if (x[i]->name == y[j]->name) continue;
      renamed[Key(group.first, x[i]->name)] = y[j]->name;
      notes.push_back(fmt::format("{} of the base is {}", x[i]->name, y[j]->name));
    }
    for (size_t i = 0; i < x.size(); ++i) {
      if (!paired[i] && other->second.contains(x[i]->name)) {
        renamed[Key(group.first, x[i]->name)] = x[i]->name + " (base build)";
      }
    }
  }
  return renamed;
}

std::map<Key, DiffCounts> Keyed(const Profile& p, const DiffOptions& options,
                                const SharedNames& shared) {
  std::vector<Key> keys;
  const Names names = NamesOf(p);
  for (const ProfileFunction& fn : p.functions) {
    keys.emplace_back(Basename(fn.image), GroupName(p, fn, options.group_by, names));
    // Told apart by their source files where known: "helper (two.c)".
    if (auto labels = shared.find(keys.back()); labels != shared.end() && !fn.source.empty()) {
      keys.back().second = fmt::format("{} ({})", keys.back().second, labels->second.at(fn.source));
    }
  }
  // (A function's clones add up: their self counts, calls and time are the function's; a clone
  // its function calls, NAME.part.N, counts in both their inclusive counts.)
  std::map<Key, DiffCounts> out;
  const double ns = NsPerTick(p), cycles = CyclesPerTick(p);
  for (size_t i = 0; i < keys.size(); ++i) {
    const ProfileFunction& fn = p.functions[i];
    DiffCounts& c = out[keys[i]];
    c.self += fn.self;
    c.inclusive += fn.inclusive;
    c.calls += fn.calls;
    c.time_ns += static_cast<double>(fn.ticks) * ns;
    c.cycles += static_cast<double>(fn.ticks) * cycles;
  }
  return out;
}

template <typename T>
T Median(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values[(values.size() - 1) / 2];
}

// The metric of one run's counts (kIpc: 0 where no cycles ran).
double Metric(const DiffCounts& c, DiffMetric metric) {
  switch (metric) {
    case DiffMetric::kSelf:
      return static_cast<double>(c.self);
    case DiffMetric::kInclusive:
      return static_cast<double>(c.inclusive);
    case DiffMetric::kCalls:
      return static_cast<double>(c.calls);
    case DiffMetric::kTime:
      return c.time_ns;
    case DiffMetric::kIpc:
      return c.cycles > 0 ? static_cast<double>(c.self) / c.cycles : 0;
  }
  return 0;
}

double Total(const Profile& p, DiffMetric metric) {
  switch (metric) {
    case DiffMetric::kCalls:
      return static_cast<double>(p.totals.calls);
    case DiffMetric::kTime:
      return static_cast<double>(p.timing->ticks) * NsPerTick(p);
    case DiffMetric::kIpc:
      return static_cast<double>(p.totals.instructions) / static_cast<double>(p.timing->cycles);
    default:
      return static_cast<double>(p.totals.instructions);
  }
}

std::optional<double> Percent(double base, double now) {
  if (base == 0) return std::nullopt;
  return 100.0 * (now - base) / base;
}

// The change in the direction that is worse: more, or for kIpc less.
std::optional<double> WorsePercent(const std::optional<double>& pct, DiffMetric metric) {
  if (!pct) return std::nullopt;
  return metric == DiffMetric::kIpc ? -*pct : *pct;
}

// kTime, kIpc: every run has what the metric needs.
absl::Status CheckTiming(std::span<const Profile> runs, DiffMetric metric) {
  if (!Timed(metric)) return absl::OkStatus();
  for (const Profile& p : runs) {
    if (!p.timing) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: no timing for --metric {}: the trace has no timing packets (record with tsc=1, "
          "ptrecord's default)",
          p.trace, DiffMetricName(metric)));
    }
    if (p.timing->ticks == 0) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: no time was counted{} for --metric {}: the trace's time did not advance while "
          "those instructions ran (too short a run between its timing packets?); --metric "
          "instructions counts them",
          p.trace, p.only_under.empty() ? "" : " under " + p.only_under, DiffMetricName(metric)));
    }
    if (p.timing->tsc_hz <= 0) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: the recording's TSC frequency is unknown (no time conversion, CPUID 0x15 or "
          "nominal frequency in its metadata), so ticks cannot become time",
          p.trace));
    }
    if (metric == DiffMetric::kIpc && p.timing->cycles == 0) {
      return absl::FailedPreconditionError(
          fmt::format("{}: no CYC packets for --metric ipc: record with cyc=1 (e.g. ptrecord "
                      "--event intel_pt/cyc=1/u); a stats --json document has no cycle counts "
                      "(give the trace.pt or perf.data)",
                      p.trace));
    }
  }
  return absl::OkStatus();
}

DiffSide MakeSide(std::span<const Profile> runs, DiffMetric metric) {
  DiffSide side;
  for (const Profile& p : runs) {
    side.inputs.push_back(p.trace);
    side.totals.push_back(Total(p, metric));
    if (p.totals.errors != 0 || p.totals.losses != 0) {
      side.incomplete.push_back(
          fmt::format("{}: {}, {} ({} lost{})", p.trace, Counted(p.totals.errors, "decode error"),
                      Counted(p.totals.losses, "loss point"), Counted(p.totals.lost_bytes, "byte"),
                      UnknownSizeLosses(p.totals.unknown_size_losses)));
    }
    // What the input lacks (a file cut short by a CI timeout: the decode of what is there).
    const size_t said = std::min<size_t>(p.totals.input_warnings, p.warnings.size());
    for (size_t i = 0; i < said; ++i) side.incomplete.push_back(p.warnings[i]);
  }
  side.total = Median(side.totals);
  return side;
}

// One key's counts on one side: the medians, and the metric of each run.
struct SideCounts {
  DiffCounts median;
  std::vector<double> values;
};

// Per key, the median of each count over the runs. Every key seen in a run gets an entry in
// `seen`, set to true when `base`.
std::map<Key, SideCounts> MedianCounts(std::span<const Profile> runs, const DiffOptions& options,
                                       const SharedNames& shared, std::map<Key, bool>& seen,
                                       bool base) {
  const DiffMetric metric = options.metric;
  std::vector<std::map<Key, DiffCounts>> keyed;
  for (const Profile& p : runs) keyed.push_back(Keyed(p, options, shared));
  std::map<Key, SideCounts> out;
  for (const auto& run : keyed) {
    for (const auto& [key, counts] : run) {
      if (out.contains(key)) continue;
      std::vector<uint64_t> self, inclusive, calls;
      std::vector<double> time, cycles;
      SideCounts& side = out[key];
      for (const auto& r : keyed) {
        auto it = r.find(key);
        const DiffCounts c = it == r.end() ? DiffCounts{} : it->second;
        self.push_back(c.self);
        inclusive.push_back(c.inclusive);
        calls.push_back(c.calls);
        time.push_back(c.time_ns);
        cycles.push_back(c.cycles);
        side.values.push_back(Metric(c, metric));
      }
      side.median = {Median(self), Median(inclusive), Median(calls), Median(time), Median(cycles)};
      seen[key] |= base;
    }
  }
  return out;
}

bool Integral(DiffMetric metric) { return !Timed(metric); }

// A value of the metric: counts and ns as integers, IPC with 3 decimals.
std::string Value(double v, DiffMetric metric) {
  if (metric == DiffMetric::kIpc) return fmt::format("{:.3f}", v);
  return fmt::format("{}", static_cast<int64_t>(std::llround(v)));
}

std::string Signed(double v, DiffMetric metric) {
  const std::string text = Value(v, metric);
  return v > 0 && text != Value(0, metric) ? "+" + text : text;
}

std::string NoiseText(const std::optional<MannWhitney>& noise) {
  if (!noise) return "";
  return fmt::format("p={:.3g}", noise->p);
}

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
  switch (metric) {
    case DiffMetric::kCalls:
      return "calls";
    case DiffMetric::kTime:
      return "time (ns)";
    case DiffMetric::kIpc:
      return "IPC";
    default:
      return "instructions";
  }
}

bool Shown(const DiffRow& row) { return row.change != 0 || row.in_base != row.in_new; }

// The soft limit of the total or of every function, named as given: "--fail-total 5%", or the
// limits file's "total soft limit 5% (limits.json)".
std::string SoftLimitName(const DiffOptions& o, bool total) {
  const double pct = total ? *o.fail_total_pct : *o.fail_function_pct;
  if (total ? o.total_from_file : o.function_from_file) {
    return fmt::format("{} soft limit {}% ({})", total ? "total" : "default", pct, o.limits_file);
  }
  return fmt::format("{} {}%", total ? "--fail-total" : "--fail-function", pct);
}

std::string LimitsText(const DiffOptions& o) {
  std::vector<std::string> parts;
  if (o.fail_total_pct) parts.push_back(SoftLimitName(o, true));
  if (o.fail_function_pct) {
    parts.push_back(
        fmt::format("{} (--min-instructions {})", SoftLimitName(o, false), o.min_instructions));
  }
  if (o.fail_on_loss) parts.push_back("--fail-on-loss");
  if (!o.limits_file.empty()) {
    parts.push_back(fmt::format(
        "the limits of {} ({})", o.limits_file,
        Counted(o.function_limits.size() + (o.total_hard ? 1 : 0), "hard or per-function limit")));
  }
  if (Timed(o.metric) && (o.fail_total_pct || o.fail_function_pct)) {
    parts.push_back(fmt::format("Mann-Whitney U p < {}", o.alpha));
  }
  if (parts.empty()) return "no limits given (--fail-total, --fail-function)";
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) out += ", " + parts[i];
  return out;
}

std::string Verdict(const DiffResult& d, const DiffOptions& o) {
  if (d.regression()) return fmt::format("REGRESSION beyond {}", LimitsText(o));
  if (!o.fail_total_pct && !o.fail_function_pct && !o.fail_on_loss && o.limits_file.empty())
    return "no limits given: nothing checked";
  return fmt::format("no regression beyond {}", LimitsText(o));
}

size_t CountIf(const DiffResult& d, bool (*pred)(const DiffRow&)) {
  return static_cast<size_t>(std::count_if(d.rows.begin(), d.rows.end(), pred));
}

// What a row is, in words.
const char* Noun(DiffGroup group) {
  return group == DiffGroup::kImage        ? "image"
         : group == DiffGroup::kSourceFile ? "source file"
                                           : "function";
}
std::string Plural(DiffGroup group) { return std::string(Noun(group)) + "s"; }

// A row as the text table names it: "function [image]", or the image.
std::string RowName(const DiffResult& d, const DiffRow& r) {
  if (d.group_by == DiffGroup::kImage) return r.image;
  return fmt::format("{} [{}]", r.function, r.image);
}

// Whether `value` is beyond the hard limit `hard` (kIpc: below it).
bool Beyond(double value, double hard, DiffMetric metric) {
  return metric == DiffMetric::kIpc ? value < hard : value > hard;
}

// The limit for `row`: its (function, image) entry, else its function's without an image.
// Whether a row is the function `name` (--allow, the limits file): its name, or one of the
// functions of that name told apart by source file ("helper" names "helper (two.c)").
bool NamedAs(const DiffRow& row, const std::string& name) {
  return row.function == name ||
         (row.function.size() > name.size() + 3 && row.function.starts_with(name) &&
          row.function.compare(name.size(), 2, " (") == 0 && row.function.ends_with(')'));
}

const FunctionLimit* FindLimit(const std::vector<FunctionLimit>& limits, const DiffRow& row) {
  const FunctionLimit* any_image = nullptr;
  for (const FunctionLimit& l : limits) {
    if (!NamedAs(row, l.function)) continue;
    if (l.image == row.image) return &l;
    if (l.image.empty() && any_image == nullptr) any_image = &l;
  }
  return any_image;
}

std::string Summary(const DiffResult& d) {
  const size_t both = CountIf(d, [](const DiffRow& r) { return r.in_base && r.in_new; });
  const size_t added = CountIf(d, [](const DiffRow& r) { return !r.in_base; });
  const size_t removed = CountIf(d, [](const DiffRow& r) { return !r.in_new; });
  const size_t changed =
      CountIf(d, [](const DiffRow& r) { return r.in_base && r.in_new && r.change != 0; });
  return fmt::format("{}: {} in both ({} changed), {} new, {} removed", Plural(d.group_by), both,
                     changed, added, removed);
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
    case DiffMetric::kTime:
      return "time";
    case DiffMetric::kIpc:
      return "ipc";
  }
  return "?";
}

const char* DiffGroupName(DiffGroup group) {
  switch (group) {
    case DiffGroup::kFunction:
      return "function";
    case DiffGroup::kImage:
      return "image";
    case DiffGroup::kSourceFile:
      return "source-file";
  }
  return "?";
}

absl::Status ParseDiffLimits(std::string_view text, const std::string& name,
                             const std::vector<std::string>& given, DiffOptions& options) {
  using Json = nlohmann::json;
  auto error = [&](const std::string& where, const std::string& what) {
    return absl::InvalidArgumentError(fmt::format("limits file {}: {}: {}", name, where, what));
  };
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(
        fmt::format("limits file {}: not valid JSON at byte {}: {}", name, e.byte, e.what()));
  }
  if (!doc.is_object()) return error("(document)", "expected an object");
  // Checks that `obj` (at `where`) has only the `known` members.
  auto only = [&](const Json& obj, const std::string& where,
                  std::initializer_list<std::string_view> known) -> absl::Status {
    if (!obj.is_object()) return error(where, "expected an object");
    for (const auto& [key, value] : obj.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        std::string names;
        for (std::string_view k : known) names += (names.empty() ? "" : ", ") + std::string(k);
        return error(where.empty() ? key : fmt::format("{}.{}", where, key),
                     fmt::format("unknown member (known: {})", names));
      }
    }
    return absl::OkStatus();
  };
  auto number = [&](const Json& obj, const std::string& where,
                    const char* key) -> absl::StatusOr<std::optional<double>> {
    auto it = obj.find(key);
    if (it == obj.end()) return std::optional<double>();
    if (!it->is_number() || it->get<double>() < 0) {
      return error(where + "." + key, "expected a number >= 0");
    }
    return std::optional<double>(it->get<double>());
  };
  auto was_given = [&](std::string_view flag) {
    return std::find(given.begin(), given.end(), flag) != given.end();
  };
  PTKIT_RETURN_IF_ERROR(only(doc, "", {"schema", "default", "total", "functions"}));
  auto schema = doc.find("schema");
  if (schema == doc.end() || !schema->is_string()) {
    return error("schema", "missing (\"ptkit-diff-limits/1\")");
  }
  if (*schema != "ptkit-diff-limits/1") {
    return error("schema", fmt::format("\"{}\" is not one this ptdecode reads "
                                       "(ptkit-diff-limits/1)",
                                       schema->get<std::string>()));
  }
  if (auto def = doc.find("default"); def != doc.end()) {
    PTKIT_RETURN_IF_ERROR(only(*def, "default", {"soft_pct", "min_instructions"}));
    PTKIT_ASSIGN_OR_RETURN(std::optional<double> soft, number(*def, "default", "soft_pct"));
    if (soft && !was_given("fail_function")) {
      options.fail_function_pct = soft;
      options.function_from_file = true;
    }
    if (auto min = def->find("min_instructions"); min != def->end()) {
      if (!min->is_number_unsigned()) {
        return error("default.min_instructions", "expected an unsigned integer");
      }
      if (!was_given("min_instructions")) options.min_instructions = min->get<uint64_t>();
    }
  }
  if (auto total = doc.find("total"); total != doc.end()) {
    PTKIT_RETURN_IF_ERROR(only(*total, "total", {"soft_pct", "hard"}));
    PTKIT_ASSIGN_OR_RETURN(std::optional<double> soft, number(*total, "total", "soft_pct"));
    if (soft && !was_given("fail_total")) {
      options.fail_total_pct = soft;
      options.total_from_file = true;
    }
    PTKIT_ASSIGN_OR_RETURN(options.total_hard, number(*total, "total", "hard"));
  }
  if (auto functions = doc.find("functions"); functions != doc.end()) {
    if (!functions->is_array()) return error("functions", "expected an array");
    for (size_t i = 0; i < functions->size(); ++i) {
      const Json& f = (*functions)[i];
      const std::string where = fmt::format("functions[{}]", i);
      PTKIT_RETURN_IF_ERROR(only(f, where, {"function", "image", "soft_pct", "hard"}));
      FunctionLimit limit;
      auto fn = f.find("function");
      if (fn == f.end() || !fn->is_string() || fn->get<std::string>().empty()) {
        return error(where + ".function", "expected a name");
      }
      limit.function = fn->get<std::string>();
      if (auto image = f.find("image"); image != f.end()) {
        if (!image->is_string()) return error(where + ".image", "expected a file name");
        limit.image = image->get<std::string>();
      }
      PTKIT_ASSIGN_OR_RETURN(limit.limit.soft_pct, number(f, where, "soft_pct"));
      PTKIT_ASSIGN_OR_RETURN(limit.limit.hard, number(f, where, "hard"));
      if (!limit.limit.soft_pct && !limit.limit.hard) {
        return error(where, "neither soft_pct nor hard: a limit that checks nothing");
      }
      options.function_limits.push_back(std::move(limit));
    }
  }
  options.limits_file = name;
  return absl::OkStatus();
}

absl::Status ReadDiffLimits(const std::string& path, const std::vector<std::string>& given,
                            DiffOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(errno, "open limits file ", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return ErrnoStatus(errno, "read limits file ", path);
  return ParseDiffLimits(text.str(), path, given, options);
}

MannWhitney MannWhitneyU(std::span<const double> a, std::span<const double> b) {
  MannWhitney r;
  const size_t n = a.size(), m = b.size();
  if (n == 0 || m == 0) return r;
  // Mid-ranks of the pooled samples; U of a = its rank sum - n(n+1)/2.
  std::vector<std::pair<double, bool>> pooled;  // (value, from a)
  for (double v : a) pooled.emplace_back(v, true);
  for (double v : b) pooled.emplace_back(v, false);
  std::sort(pooled.begin(), pooled.end());
  const size_t total = n + m;
  double rank_sum = 0, tie_term = 0;
  bool ties = false;
  for (size_t i = 0; i < total;) {
    size_t j = i;
    while (j < total && pooled[j].first == pooled[i].first) ++j;
    const double mid = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k) rank_sum += pooled[k].second ? mid : 0;
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    ties |= j - i > 1;
    i = j;
  }
  const double nm = static_cast<double>(n) * static_cast<double>(m);
  r.u = rank_sum - static_cast<double>(n) * static_cast<double>(n + 1) / 2;
  if (!ties && n <= 50 && m <= 50) {
    // counts[k]: arrangements of n a's and m b's with U = k, by the recurrence
    // f(i, j, k) = f(i - 1, j, k - j) + f(i, j - 1, k) (the largest value is an a or a b).
    std::vector<std::vector<double>> f(m + 1);
    for (size_t j = 0; j <= m; ++j) f[j].assign(1, 1.0);  // i = 0: U = 0 only
    for (size_t i = 1; i <= n; ++i) {
      std::vector<std::vector<double>> g(m + 1);
      for (size_t j = 0; j <= m; ++j) {
        g[j].assign(i * j + 1, 0.0);
        for (size_t k = 0; k < f[j].size(); ++k) g[j][k + j] += f[j][k];  // a largest: +j
        if (j > 0) {
          for (size_t k = 0; k < g[j - 1].size(); ++k) g[j][k] += g[j - 1][k];
        }
      }
      f = std::move(g);
    }
    const std::vector<double>& counts = f[m];
    double all = 0, below = 0, above = 0;
    for (double c : counts) all += c;
    const auto u = static_cast<size_t>(r.u);
    for (size_t k = 0; k < counts.size(); ++k) {
      if (k <= u) below += counts[k];
      if (k >= u) above += counts[k];
    }
    r.p = std::min(1.0, 2 * std::min(below, above) / all);
    r.exact = true;
    return r;
  }
  const double sigma = std::sqrt(
      nm / 12 *
      (static_cast<double>(total + 1) - tie_term / (static_cast<double>(total) * (total - 1))));
  if (sigma == 0) return r;  // every value equal: no difference
  const double z = std::max(0.0, std::abs(r.u - nm / 2) - 0.5) / sigma;
  r.p = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return r;
}

// Images are matched by file name. A program named otherwise on each side (ptdecode(1)'s CI
// example records ./bench-base and ./bench-new) would have only new and removed functions, none
// compared, and pass any check (sweep 37a F3): when each side has exactly one image the other
// lacks and it is the side's program (the image of its main), the two are taken for one, the
// new side's keyed by the base's name. (Not two libraries: a build that links libm instead of
// libz compared libm's functions as libz's, a false regression: a review.) Returns the new
// side's name and the base's, or nothing when there is no such pair.
std::optional<std::pair<std::string, std::string>> PairTheOddImages(std::span<const Profile> base,
                                                                    std::span<const Profile> now) {
  auto images = [](std::span<const Profile> side, std::set<std::string>& programs) {
    std::set<std::string> out;
    for (const Profile& p : side) {
      for (const ProfileFunction& fn : p.functions) {
        out.insert(std::string(Basename(fn.image)));
        if (fn.function == "main") programs.insert(std::string(Basename(fn.image)));
      }
    }
    return out;
  };
  std::set<std::string> base_programs, new_programs;
  const std::set<std::string> in_base = images(base, base_programs);
  const std::set<std::string> in_now = images(now, new_programs);
  std::vector<std::string> only_base, only_new;
  std::set_difference(in_base.begin(), in_base.end(), in_now.begin(), in_now.end(),
                      std::back_inserter(only_base));
  std::set_difference(in_now.begin(), in_now.end(), in_base.begin(), in_base.end(),
                      std::back_inserter(only_new));
  if (only_base.size() != 1 || only_new.size() != 1 || !base_programs.contains(only_base[0]) ||
      !new_programs.contains(only_new[0])) {
    return std::nullopt;
  }
  return std::make_pair(only_new[0], only_base[0]);
}

absl::StatusOr<DiffResult> DiffProfiles(std::span<const Profile> base, std::span<const Profile> now,
                                        const DiffOptions& options) {
  if (base.empty() || now.empty()) {
    return absl::InvalidArgumentError("diff needs at least one run on each side (BASE and NEW)");
  }
  const DiffMetric metric = options.metric;
  if (metric == DiffMetric::kInclusive && options.group_by != DiffGroup::kFunction) {
    return absl::InvalidArgumentError(fmt::format(
        "--metric inclusive with --group-by {}: the inclusive counts of a group's functions "
        "overlap (a caller's include its callees'), so their sum means nothing; use self",
        DiffGroupName(options.group_by)));
  }
  PTKIT_RETURN_IF_ERROR(CheckTiming(base, metric));
  PTKIT_RETURN_IF_ERROR(CheckTiming(now, metric));
  DiffResult d;
  d.metric = metric;
  d.group_by = options.group_by;
  std::vector<Profile> renamed_now;
  if (auto pair = PairTheOddImages(base, now)) {
    renamed_now.assign(now.begin(), now.end());
    for (Profile& p : renamed_now) {
      for (ProfileFunction& fn : p.functions) {
        if (Basename(fn.image) == pair->first) fn.image = pair->second;
      }
      for (ProfileImage& image : p.images) {
        if (Basename(image.image) == pair->first) image.image = pair->second;
      }
    }
    now = renamed_now;
    d.warnings.push_back(fmt::format(
        "{} of the new side is compared as {} of the base: images are matched by file name, and "
        "these are the programs (they run main) and the only image of each side that the other "
        "lacks",
        pair->first, pair->second));
  }
  // The base with the names of functions numbered otherwise in the new build (PairByCode).
  std::vector<Profile> renamed_base;
  if (options.group_by == DiffGroup::kFunction) {
    std::vector<std::string> pairs;
    const std::map<Key, std::string> renamed = PairByCode(base, now, pairs);
    if (!renamed.empty()) {
      renamed_base.assign(base.begin(), base.end());
      for (Profile& p : renamed_base) {
        for (ProfileFunction& fn : p.functions) {
          auto it = renamed.find(Key(Basename(fn.image), fn.function));
          if (it != renamed.end()) fn.function = it->second;
        }
      }
      base = renamed_base;
    }
    if (!pairs.empty()) {
      d.warnings.push_back(fmt::format(
          "{} function{} the compiler numbered otherwise in the new build (a lambda added or "
          "removed before them) {} matched by {} code: {}{}",
          pairs.size(), pairs.size() == 1 ? "" : "s", pairs.size() == 1 ? "is" : "are",
          pairs.size() == 1 ? "its" : "their", pairs.front(),
          pairs.size() > 1 ? fmt::format(" (and {} more)", pairs.size() - 1) : ""));
    }
  }
  d.base = MakeSide(base, metric);
  d.now = MakeSide(now, metric);
  std::vector<bool> used(options.function_limits.size());
  std::map<Key, bool> in_base;
  const SharedNames shared = FindSharedNames(base, now, options);
  std::map<Key, SideCounts> b = MedianCounts(base, options, shared, in_base, true);
  std::map<Key, SideCounts> n = MedianCounts(now, options, shared, in_base, false);
  size_t common = 0, by_offset = 0;
  // A change beyond a limit counts for kTime / kIpc only when the runs differ beyond noise.
  auto significant = [&](const std::optional<MannWhitney>& noise) {
    return !noise || noise->p < options.alpha;
  };
  auto fail = [&d](DiffRow& row, std::string why) {
    row.regression = true;
    row.failures.push_back(why);
    d.reasons.push_back(std::move(why));
  };
  for (const auto& [key, was_in_base] : in_base) {
    DiffRow row;
    row.image = key.first;
    row.function = key.second;
    row.in_base = was_in_base;
    row.in_new = n.contains(key);
    common += row.in_base && row.in_new;
    if (row.in_base) row.base = b[key].median;
    if (row.in_new) row.now = n[key].median;
    row.base_value = row.in_base ? Median(b[key].values) : 0;
    row.new_value = row.in_new ? Median(n[key].values) : 0;
    if (Timed(metric) && row.in_base && row.in_new) {
      row.noise = MannWhitneyU(n[key].values, b[key].values);
    }
    row.change = row.new_value - row.base_value;
    row.change_pct = Percent(row.base_value, row.new_value);
    row.allowed = std::any_of(options.allow.begin(), options.allow.end(),
                              [&](const std::string& name) { return NamedAs(row, name); });
    const FunctionLimit* limit = FindLimit(options.function_limits, row);
    if (limit != nullptr) {
      row.limit = limit->limit;
      used[limit - options.function_limits.data()] = true;
    }
    const std::optional<double> soft = limit != nullptr && limit->limit.soft_pct
                                           ? limit->limit.soft_pct
                                           : options.fail_function_pct;
    if (soft && row.in_base && row.in_new) {
      const uint64_t size = metric == DiffMetric::kInclusive
                                ? std::max(row.base.inclusive, row.now.inclusive)
                                : std::max(row.base.self, row.now.self);
      // A function named in the limits file is checked whatever its size; code without a
      // symbol matched by its offset is not by --fail-function (a removed function before it
      // pairs it with another: a false regression, sweep 28c F2): its cost is in the total.
      row.checked = (limit != nullptr && limit->limit.soft_pct) ||
                    (size >= options.min_instructions && !ByOffset(row.function));
      by_offset += ByOffset(row.function) && !row.checked;
      std::optional<double> worse = WorsePercent(row.change_pct, metric);
      // From 0 instructions (a function that ran in fewer than half the base runs: its median is
      // 0) to more: beyond any percentage (sweep 32b F3: 0 -> 100,005 instructions passed every
      // limit). Not 0 calls (code only jumped into) nor 0 ns (too short to be timed).
      if (!worse && row.base_value == 0 && row.new_value > 0 &&
          (metric == DiffMetric::kSelf || metric == DiffMetric::kInclusive)) {
        worse = std::numeric_limits<double>::infinity();
      }
      if (row.checked && !row.allowed && worse && *worse > *soft && significant(row.noise)) {
        fail(row,
             fmt::format("{}: {} {} -> {} ({}{}) > {}", RowName(d, row), DiffMetricName(metric),
                         Value(row.base_value, metric), Value(row.new_value, metric),
                         row.change_pct ? PercentText(row.change_pct) : "from 0",
                         row.noise ? ", " + NoiseText(row.noise) : "",
                         limit != nullptr && limit->limit.soft_pct
                             ? fmt::format("soft limit {}% ({})", *soft, options.limits_file)
                             : SoftLimitName(options, false)));
      }
    }
    if (limit != nullptr && limit->limit.hard && row.in_new) row.checked = true;
    if (limit != nullptr && limit->limit.hard && row.in_new && !row.allowed &&
        Beyond(row.new_value, *limit->limit.hard, metric)) {
      fail(row,
           fmt::format("{}: {} {} {} hard limit {} ({})", RowName(d, row), DiffMetricName(metric),
                       Value(row.new_value, metric), metric == DiffMetric::kIpc ? "<" : ">",
                       Value(*limit->limit.hard, metric), options.limits_file));
    }
    d.rows.push_back(std::move(row));
  }
  if (by_offset != 0 && options.fail_function_pct) {
    d.warnings.push_back(fmt::format(
        "functions without a symbol (a stripped program's; {} in both sides) are matched by "
        "their offset from a function with one, which code added or removed before them moves: "
        "they are listed, not checked by --fail-function (the total is); a build with symbols "
        "(or its debug file) is compared function by function",
        by_offset));
  }
  // Images matched by file name: a program named otherwise on each side (bench-base,
  // bench-new) has only new and removed functions, none checked.
  if (options.group_by != DiffGroup::kSourceFile) {
    std::set<std::string> only_base, only_new;
    for (const DiffRow& row : d.rows) {
      if (row.in_base != row.in_new) (row.in_base ? only_base : only_new).insert(row.image);
    }
    for (const DiffRow& row : d.rows) {
      if (row.in_base && row.in_new) {
        only_base.erase(row.image);
        only_new.erase(row.image);
      }
    }
    if (!only_base.empty() && !only_new.empty()) {
      d.warnings.push_back(fmt::format(
          "{} only in the base and {} only in the new side: images are matched by file name, so "
          "their functions are new and removed, not compared; give the programs one name on "
          "both sides (examples/ci/perf-regression.sh copies each build to the same path)",
          absl::StrJoin(only_base, ", "), absl::StrJoin(only_new, ", ")));
    }
  }
  // A function the new build inlined into its callers (-O2 -> -O3: lookup.part.0) is removed,
  // and its instructions count in each caller's self: a caller's "regression" of as many
  // instructions (sweep 34b F6: main +268% where the total fell 5.8%) is said as maybe that.
  if (metric == DiffMetric::kSelf && options.group_by == DiffGroup::kFunction) {
    for (const DiffRow& grown : d.rows) {
      if (!grown.regression || !grown.in_base || grown.change <= 0) continue;
      std::vector<std::string> gone;
      double removed = 0;
      for (const DiffRow& r : d.rows) {
        if (!r.in_base || r.in_new || r.image != grown.image) continue;
        gone.push_back(r.function);
        removed += r.base_value;
      }
      if (gone.empty() || removed < grown.change / 2) continue;
      d.warnings.push_back(fmt::format(
          "{} grew by {} instructions where {} of {} ran in the base and not in the new: code a "
          "build inlines into its callers counts in their self instructions; --metric "
          "inclusive compares each function with what it calls",
          RowName(d, grown), Value(grown.change, metric), absl::StrJoin(gone, ", "),
          Value(removed, metric)));
    }
  }
  if (common == 0) {
    return absl::InvalidArgumentError(fmt::format(
        "{} and {} have no function in common (matched by image file name and function name): "
        "are they recordings of the same program?",
        d.base.inputs[0], d.now.inputs[0]));
  }
  std::stable_sort(d.rows.begin(), d.rows.end(), [](const DiffRow& x, const DiffRow& y) {
    return std::abs(x.change) > std::abs(y.change);
  });
  d.total_change = d.now.total - d.base.total;
  d.total_change_pct = Percent(d.base.total, d.now.total);
  if (Timed(metric)) d.total_noise = MannWhitneyU(d.now.totals, d.base.totals);
  const std::optional<double> worse = WorsePercent(d.total_change_pct, metric);
  std::vector<std::string> total_failures;
  if (options.fail_total_pct && worse && *worse > *options.fail_total_pct &&
      significant(d.total_noise)) {
    total_failures.push_back(fmt::format(
        "total {} {} -> {} ({}{}) > {}", TotalName(metric), Value(d.base.total, metric),
        Value(d.now.total, metric), PercentText(d.total_change_pct),
        d.total_noise ? ", " + NoiseText(d.total_noise) : "", SoftLimitName(options, true)));
  }
  if (options.total_hard && Beyond(d.now.total, *options.total_hard, metric)) {
    total_failures.push_back(fmt::format("total {} {} {} hard limit {} ({})", TotalName(metric),
                                         Value(d.now.total, metric),
                                         metric == DiffMetric::kIpc ? "<" : ">",
                                         Value(*options.total_hard, metric), options.limits_file));
  }
  d.total_regression = !total_failures.empty();
  d.reasons.insert(d.reasons.begin(), total_failures.begin(), total_failures.end());
  d.total_failures = std::move(total_failures);
  for (size_t i = 0; i < used.size(); ++i) {
    if (used[i]) continue;
    const FunctionLimit& l = options.function_limits[i];
    d.warnings.push_back(fmt::format("{}: no {} \"{}\"{} in either side: its limit checks nothing",
                                     options.limits_file, Noun(options.group_by), l.function,
                                     l.image.empty() ? "" : " [" + l.image + "]"));
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

// What the runs counted, for the header.
std::string CountedNote(const DiffOptions& o) {
  if (o.only_under.empty()) return "everything, start-up included (--include-startup)";
  if (o.only_under == "main") {
    return "only what ran under main, in the threads it started and in forked processes (until "
           "they exec; a Go program: all once main.main began): not the start-up before it nor "
           "exit (--exclude-startup, the default)";
  }
  return fmt::format("only what ran under {} (--only-under)", o.only_under);
}

// kTime, kIpc: how the noise is judged, for the header.
std::string NoiseNote(const DiffResult& d, const DiffOptions& o) {
  const size_t runs = std::min(d.base.inputs.size(), d.now.inputs.size());
  return fmt::format(
      "{}: the median of each side's runs; a change counts only when Mann-Whitney U p < {}{}",
      d.metric == DiffMetric::kTime ? "time in ns, each function's self time" : "IPC", o.alpha,
      runs < 4 ? " (needs at least 4 runs a side to reach p < 0.05)" : "");
}

std::string FormatDiffText(const DiffResult& d, const DiffOptions& o, bool color) {
  const DiffMetric m = d.metric;
  // ANSI SGR: red for worse, green for better, bold red for what fails.
  auto paint = [color](const std::string& text, const char* sgr) {
    return color && !text.empty() ? fmt::format("\x1b[{}m{}\x1b[0m", sgr, text) : text;
  };
  constexpr const char* kRed = "31";
  constexpr const char* kGreen = "32";
  constexpr const char* kBoldRed = "1;31";
  constexpr const char* kBold = "1";
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "# metric: {}; base: {}; new: {}\n", DiffMetricName(m), Runs(d.base),
                 Runs(d.now));
  fmt::format_to(it, "# counted: {}\n", CountedNote(o));
  if (Timed(m)) fmt::format_to(it, "# {}\n", NoiseNote(d, o));
  for (const std::string& w : d.warnings)
    fmt::format_to(it, "# {}\n", paint("warning: " + w, kRed));
  for (const DiffSide* side : {&d.base, &d.now}) {
    for (const std::string& why : side->incomplete) {
      fmt::format_to(it, "# {}\n",
                     paint(fmt::format("warning: {} side incomplete: {}: counts may not be "
                                       "comparable",
                                       side == &d.base ? "base" : "new", why),
                           kRed));
    }
  }
  fmt::format_to(it, "# total {}: {} -> {} ({}, {}{})\n", TotalName(m), Value(d.base.total, m),
                 Value(d.now.total, m), Signed(d.total_change, m), PercentText(d.total_change_pct),
                 d.total_noise ? ", " + NoiseText(d.total_noise) : "");
  fmt::format_to(it, "# {}\n", Summary(d));
  // The table: each number column as wide as its widest cell.
  using Cells = std::vector<std::string>;
  std::vector<Cells> cells = {{"base", "new", "change", "change%"}};
  if (Timed(m)) cells[0].push_back("p");
  std::vector<const DiffRow*> rows;
  for (const DiffRow& r : d.rows) {
    if (!Shown(r)) continue;
    rows.push_back(&r);
    cells.push_back(
        {Value(r.base_value, m), Value(r.new_value, m), Signed(r.change, m), ChangeText(r)});
    if (Timed(m)) cells.back().push_back(r.noise ? fmt::format("{:.3g}", r.noise->p) : "-");
  }
  std::vector<size_t> width = {12, 12, 12, 9, 9};  // at least; wider when a cell is
  width.resize(cells[0].size());
  for (const Cells& row : cells) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const Cells& row, const char* sgr, const std::string& name) {
    std::string text;
    for (size_t c = 0; c < row.size(); ++c) {
      text += fmt::format("{}{:>{}}", c == 0 ? "" : " ", row[c], width[c]);
    }
    fmt::format_to(it, "{}  {}\n", paint(text, sgr), name);
  };
  out += "\n";
  line(cells[0], kBold,
       d.group_by == DiffGroup::kImage ? "image" : fmt::format("{} [image]", Noun(d.group_by)));
  for (size_t i = 0; i < rows.size(); ++i) {
    const DiffRow& r = *rows[i];
    const std::optional<double> worse = WorsePercent(r.change_pct, m);
    const bool up = r.in_base && r.in_new ? worse.value_or(0) > 0 : !r.in_base;
    const char* sgr = r.regression ? kBoldRed : up ? kRed : kGreen;
    line(cells[i + 1], sgr,
         fmt::format("{}{}", RowName(d, r),
                     r.regression ? "  " + paint("REGRESSION", kBoldRed)
                                  : (r.allowed ? "  (allowed)" : "")));
  }
  if (rows.empty()) {
    fmt::format_to(it, "{:>{}}  (no {} changed)\n", "", width[0], Noun(d.group_by));
  }
  fmt::format_to(it, "\n{}\n", paint(Verdict(d, o), d.regression() ? kBoldRed : kGreen));
  for (const std::string& reason : d.reasons) fmt::format_to(it, "  {}\n", reason);
  return out;
}

bool DiffColor(std::string_view mode, bool is_tty, const char* no_color_env, const char* term_env) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  const bool no_color = no_color_env != nullptr && no_color_env[0] != '\0';
  const bool dumb = term_env != nullptr && std::string_view(term_env) == "dumb";
  return is_tty && !no_color && !dumb;
}

std::string FormatDiffMarkdown(const DiffResult& d, const DiffOptions& o) {
  auto cell = [](const std::string& s) {  // a table cell: '|' would end it
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  const DiffMetric m = d.metric;
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "### ptdecode diff: {}\n\n", d.regression() ? "regression" : "no regression");
  fmt::format_to(it, "Metric **{}**; base `{}`, new `{}`; counted: {}.\n\n", DiffMetricName(m),
                 Runs(d.base), Runs(d.now), CountedNote(o));
  if (Timed(m)) fmt::format_to(it, "{}.\n\n", NoiseNote(d, o));
  for (const std::string& w : d.warnings) {
    fmt::format_to(it, "> **Warning**: {}.\n\n", cell(w));
  }
  for (const DiffSide* side : {&d.base, &d.now}) {
    for (const std::string& why : side->incomplete) {
      fmt::format_to(it, "> **Warning**: {} side incomplete: {}: counts may not be comparable.\n\n",
                     side == &d.base ? "base" : "new", cell(why));
    }
  }
  fmt::format_to(it, "Total {}: {} → {} ({}, {}{}). {}.\n\n", TotalName(m), Value(d.base.total, m),
                 Value(d.now.total, m), Signed(d.total_change, m), PercentText(d.total_change_pct),
                 d.total_noise ? ", " + NoiseText(d.total_noise) : "", Summary(d));
  // By image the image is the row's name: no image column.
  const bool by_image = d.group_by == DiffGroup::kImage;
  fmt::format_to(it, "| {} |{} base | new | change | change % |{}\n", Noun(d.group_by),
                 by_image ? "" : " image |", Timed(m) ? " p |" : "");
  fmt::format_to(it, "|:--|{}--:|--:|--:|--:|{}\n", by_image ? "" : ":--|", Timed(m) ? "--:|" : "");
  size_t shown = 0;
  for (const DiffRow& r : d.rows) {
    if (!Shown(r)) continue;
    ++shown;
    fmt::format_to(
        it, "| `{}`{} |{} {} | {} | {} | {} |{}\n", cell(by_image ? r.image : r.function),
        r.regression ? " **regression**" : (r.allowed ? " (allowed)" : ""),
        by_image ? "" : " " + cell(r.image) + " |", Value(r.base_value, m), Value(r.new_value, m),
        Signed(r.change, m), ChangeText(r),
        Timed(m) ? fmt::format(" {} |", r.noise ? fmt::format("{:.3g}", r.noise->p) : "-") : "");
  }
  if (shown == 0) {
    fmt::format_to(it, "| (no {} changed) |{} | | | |{}\n", Noun(d.group_by), by_image ? "" : " |",
                   Timed(m) ? " |" : "");
  }
  fmt::format_to(it, "\n{}.\n", Verdict(d, o));
  for (const std::string& reason : d.reasons) fmt::format_to(it, "- {}\n", cell(reason));
  return out;
}

std::string FormatDiffJson(const DiffResult& d, const DiffOptions& o) {
  using Json = nlohmann::ordered_json;
  const DiffMetric m = d.metric;
  auto pct = [](const std::optional<double>& p) { return p ? Json(*p) : Json(nullptr); };
  // Counts as integers, time and IPC as numbers.
  auto value = [m](double v) {
    return Integral(m) ? Json(static_cast<int64_t>(std::llround(v))) : Json(v);
  };
  auto noise = [](const std::optional<MannWhitney>& w) {
    if (!w) return Json(nullptr);
    return Json{{"test", "mann-whitney-u"}, {"u", w->u}, {"p", w->p}, {"exact", w->exact}};
  };
  auto side = [&](const DiffSide& s) {
    Json totals = Json::array();
    for (double t : s.totals) totals.push_back(value(t));
    Json j{{"inputs", s.inputs}, {"total", value(s.total)}, {"incomplete", s.incomplete}};
    if (Timed(m)) j["totals"] = totals;
    return j;
  };
  auto counts = [&](const DiffCounts& c) {
    Json j{{"self", c.self}, {"inclusive", c.inclusive}, {"calls", c.calls}};
    if (Timed(m)) {
      j["time_ns"] = c.time_ns;
      j["cycles"] = c.cycles;
    }
    return j;
  };
  Json doc;
  doc["schema"] = "ptkit-diff/1";
  doc["metric"] = DiffMetricName(m);
  doc["group_by"] = DiffGroupName(d.group_by);
  doc["only_under"] = o.only_under.empty() ? Json() : Json(o.only_under);
  doc["base"] = side(d.base);
  doc["new"] = side(d.now);
  doc["total"] = {{"base", value(d.base.total)},     {"new", value(d.now.total)},
                  {"change", value(d.total_change)}, {"change_pct", pct(d.total_change_pct)},
                  {"noise", noise(d.total_noise)},   {"regression", d.total_regression}};
  doc["limits"] = {{"fail_total_pct", o.fail_total_pct ? Json(*o.fail_total_pct) : Json()},
                   {"fail_function_pct", o.fail_function_pct ? Json(*o.fail_function_pct) : Json()},
                   {"min_instructions", o.min_instructions},
                   {"allow", o.allow},
                   {"fail_on_loss", o.fail_on_loss},
                   {"alpha", o.alpha},
                   {"file", o.limits_file.empty() ? Json() : Json(o.limits_file)},
                   {"total_hard", o.total_hard ? Json(*o.total_hard) : Json()}};
  Json rows = Json::array();
  for (const DiffRow& r : d.rows) {
    rows.push_back(
        {{"function", r.function},
         {"image", r.image},
         {"status", !r.in_base      ? "new"
                    : !r.in_new     ? "removed"
                    : r.change != 0 ? "changed"
                                    : "same"},
         {"base", r.in_base ? counts(r.base) : Json()},
         {"new", r.in_new ? counts(r.now) : Json()},
         {"base_value", value(r.base_value)},
         {"new_value", value(r.new_value)},
         {"change", value(r.change)},
         {"change_pct", pct(r.change_pct)},
         {"noise", noise(r.noise)},
         {"checked", r.checked},
         {"limit", r.limit
                       ? Json{{"soft_pct", r.limit->soft_pct ? Json(*r.limit->soft_pct) : Json()},
                              {"hard", r.limit->hard ? Json(*r.limit->hard) : Json()}}
                       : Json()},
         {"allowed", r.allowed},
         {"regression", r.regression}});
  }
  doc["functions"] = rows;
  doc["warnings"] = d.warnings;
  doc["regressions"] = d.reasons;
  doc["regression"] = d.regression();
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string FormatDiffJunit(const DiffResult& d, const DiffOptions& o) {
  auto xml = [](std::string_view text) {
    std::string out;
    for (char c : text) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&quot;";
          break;
        default:
          // XML 1.0 has no other control characters than tab, newline and carriage return.
          if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
            out += '?';
          } else {
            out += c;
          }
      }
    }
    return out;
  };
  struct Case {
    std::string classname, name, detail;
    std::vector<std::string> failures;
  };
  std::vector<Case> cases;
  const DiffMetric m = d.metric;
  if (o.fail_total_pct || o.total_hard) {
    cases.push_back({"total", TotalName(m),
                     fmt::format("{} -> {} ({})", Value(d.base.total, m), Value(d.now.total, m),
                                 PercentText(d.total_change_pct)),
                     d.total_failures});
  }
  for (const DiffRow& r : d.rows) {
    if (!r.checked) continue;
    cases.push_back(
        {r.image, d.group_by == DiffGroup::kImage ? r.image : r.function,
         fmt::format("{} {} -> {} ({}){}", DiffMetricName(m), Value(r.base_value, m),
                     Value(r.new_value, m), ChangeText(r), r.allowed ? ", allowed" : ""),
         r.failures});
  }
  if (o.fail_on_loss) {
    for (const DiffSide* side : {&d.base, &d.now}) {
      for (size_t i = 0; i < side->inputs.size(); ++i) {
        Case c{"complete", side->inputs[i], "no decode error or loss"};
        for (const std::string& why : side->incomplete) {
          if (why.starts_with(side->inputs[i] + ":")) c.failures.push_back(why);
        }
        if (!c.failures.empty()) c.detail = absl::StrJoin(c.failures, "\n");
        cases.push_back(std::move(c));
      }
    }
  }
  if (cases.empty()) cases.push_back({"ptdecode diff", "limits", Verdict(d, o)});
  size_t failures = 0;
  for (const Case& c : cases) failures += !c.failures.empty();
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fmt::format_to(it, "<testsuites name=\"ptdecode diff\" tests=\"{}\" failures=\"{}\">\n",
                 cases.size(), failures);
  fmt::format_to(it, "  <testsuite name=\"ptdecode diff {}\" tests=\"{}\" failures=\"{}\">\n",
                 xml(DiffMetricName(m)), cases.size(), failures);
  for (const Case& c : cases) {
    fmt::format_to(it, "    <testcase classname=\"{}\" name=\"{}\">", xml(c.classname),
                   xml(c.name));
    // One failure a case, as JUnit readers (GitLab, Jenkins) show one (sweep 40b M5: a cut run
    // had two, each saying "no decode error or loss").
    if (!c.failures.empty()) {
      fmt::format_to(it, "\n      <failure message=\"{}\">{}</failure>",
                     xml(absl::StrJoin(c.failures, "; ")), xml(c.detail));
    }
    fmt::format_to(it, "{}<system-out>{}</system-out></testcase>\n",
                   c.failures.empty() ? "" : "\n      ", xml(c.detail));
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

namespace {

// The core cycles of the CYC packets in every stream of `r` (0 without any).
absl::StatusOr<uint64_t> CountCycles(const Recording& r) {
  if (r.bts || !r.spool) return 0;
  uint64_t cycles = 0;
  for (const auto& [key, stream] : r.streams) {
    for (const Piece& piece : stream.pieces) {
      PTKIT_ASSIGN_OR_RETURN(SpoolView view, r.spool->Map(piece.run));
      if (view.bytes().empty()) continue;
      PTKIT_ASSIGN_OR_RETURN(pt_config config, MakePtConfig(view.bytes(), r.config));
      PacketDecoderPtr dec(pt_pkt_alloc_decoder(&config));
      if (!dec) return absl::ResourceExhaustedError("pt_pkt_alloc_decoder");
      pt_packet packet;
      // Resynchronises after an error, as the decoders do.
      while (pt_pkt_sync_forward(dec.get()) >= 0) {
        while (pt_pkt_next(dec.get(), &packet, sizeof(packet)) >= 0) {
          if (packet.type == ppt_cyc) cycles += packet.payload.cyc.value;
        }
      }
    }
  }
  return cycles;
}

}  // namespace

namespace {

// One run's folded stacks (stack -> weight), as `ptdecode folded` prints them.
absl::StatusOr<std::map<std::string, uint64_t>> FoldedStacks(const std::string& path,
                                                             const ContainerOptions& options,
                                                             const ProfileSinkOptions& extra,
                                                             FoldedWeight weight) {
  {
    std::ifstream in(path, std::ios::binary);
    char first = 0;
    while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
    }
    if (first == '{') {
      return absl::FailedPreconditionError(fmt::format(
          "{}: a stats --json document has no call stacks for --format folded; give the "
          "trace.pt",
          path));
    }
  }
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = ::open_memstream(&text, &size);
  if (out == nullptr) return ErrnoStatus(errno, "open_memstream");
  std::unique_ptr<char, decltype(&std::free)> owned(nullptr, &std::free);
  absl::Status decoded;
  {
    PTKIT_ASSIGN_OR_RETURN(auto empty, ProgramImage::Create());
    OutputOptions output;
    output.weight = weight;
    auto sink = WithProgress(MakeFoldedSink(*empty, out, output), options.progress);
    decoded = DecodeContainer(path, options, *sink).status();
  }
  const int closed = std::fclose(out);
  const int close_errno = errno;
  owned.reset(text);
  if (closed != 0) return ErrnoStatus(close_errno, "close the folded output in memory");
  PTKIT_RETURN_IF_ERROR(decoded);
  std::map<std::string, uint64_t> stacks;
  const std::string all(text, size);
  std::string root = extra.only_under;
  // A Go program (--exclude-startup's main is its main.main; a review: the flame graph was
  // empty): its goroutines share the threads, each switch ending the frames there, so its stacks
  // are kept whole, as stats counts all its process runs once main.main began (ScopedCounts).
  if (root == "main" && all.find(";main;") == std::string::npos && !all.starts_with("main;") &&
      all.find("main.main") != std::string::npos) {
    root.clear();
  }
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    std::string stack = line.substr(0, space);
    if (!root.empty()) {  // the stack from the root's outermost frame on
      std::vector<std::string> frames = absl::StrSplit(stack, ';');
      auto it = std::find(frames.begin(), frames.end(), root);
      if (it == frames.end()) continue;
      stack = absl::StrJoin(it, frames.end(), ";");
    }
    uint64_t count = 0;
    if (!ParseUnsigned(std::string_view(line).substr(space + 1), &count)) {
      return absl::InternalError(fmt::format("folded output of {}: bad line '{}'", path, line));
    }
    stacks[stack] += count;
  }
  return stacks;
}

// Per stack, the median of its weight over the runs (0 in a run without it).
absl::StatusOr<std::map<std::string, uint64_t>> MedianStacks(const std::vector<std::string>& runs,
                                                             const ContainerOptions& options,
                                                             const ProfileSinkOptions& extra,
                                                             FoldedWeight weight) {
  std::vector<std::map<std::string, uint64_t>> all;
  for (const std::string& path : runs) {
    PTKIT_ASSIGN_OR_RETURN(auto stacks, FoldedStacks(path, options, extra, weight));
    all.push_back(std::move(stacks));
  }
  std::map<std::string, uint64_t> out;
  for (const auto& run : all) {
    for (const auto& [stack, count] : run) {
      if (out.contains(stack)) continue;
      std::vector<uint64_t> values;
      for (const auto& r : all) {
        auto it = r.find(stack);
        values.push_back(it == r.end() ? 0 : it->second);
      }
      out[stack] = Median(values);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> DiffFolded(const std::vector<std::string>& base,
                                       const std::vector<std::string>& now,
                                       const ContainerOptions& options,
                                       const ProfileSinkOptions& extra, FoldedWeight weight) {
  PTKIT_ASSIGN_OR_RETURN(auto b, MedianStacks(base, options, extra, weight));
  PTKIT_ASSIGN_OR_RETURN(auto n, MedianStacks(now, options, extra, weight));
  for (const auto& [stack, count] : n) b.try_emplace(stack, 0);
  std::string out;
  for (const auto& [stack, count] : b) {
    auto it = n.find(stack);
    fmt::format_to(std::back_inserter(out), "{} {} {}\n", stack, count,
                   it == n.end() ? 0 : it->second);
  }
  return out;
}

absl::StatusOr<Profile> LoadProfile(const std::string& path, const ContainerOptions& options,
                                    const ProfileSinkOptions& extra) {
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
    // What the document counted cannot change after the fact: it must be what is asked.
    if (profile->only_under != extra.only_under) {
      auto what = [](const std::string& f) {
        return f.empty() ? std::string("everything, start-up included")
                         : "only what ran under " + f;
      };
      return absl::FailedPreconditionError(fmt::format(
          "{}: the stats --json document counts {}, the diff {}: make it with `ptdecode stats "
          "--json{}` or give {}, or give the trace.pt",
          path, what(profile->only_under), what(extra.only_under),
          extra.only_under.empty()     ? ""
          : extra.only_under == "main" ? " --exclude-startup"
                                       : " --only-under " + extra.only_under,
          profile->only_under.empty()     ? "--include-startup"
          : profile->only_under == "main" ? "--exclude-startup"
                                          : "--only-under " + profile->only_under));
    }
    if (extra.timing && !profile->timing) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: a stats --json document without timing (its trace had no timing packets, or an "
          "older ptdecode made it); give the trace.pt",
          path));
    }
    if (extra.source_files && !profile->source_files) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: a stats --json document without source files (an older ptdecode made it); give "
          "the trace.pt",
          path));
    }
    return profile;
  }
  in.close();
  PTKIT_ASSIGN_OR_RETURN(Recording recording, OpenRecording(path, options));
  PTKIT_ASSIGN_OR_RETURN(auto empty, ProgramImage::Create());
  OutputOptions output;
  output.trace_name = path;
  output.clock = TscClockFromMetadata(recording.metadata);
  Profile profile;
  auto sink = WithProgress(MakeProfileSink(*empty, output, &profile, extra), options.progress,
                           TraceBytes(recording));
  PTKIT_ASSIGN_OR_RETURN(DecodeTotals totals, DecodeRecording(recording, options, *sink));
  if (totals.instructions == 0) {
    std::vector<std::string> codes;
    for (const auto& [code, count] : totals.errors_by_code) {
      codes.push_back(fmt::format("{} {}", IptErrorName(code), count));
    }
    const bool nomap = totals.errors_by_code.contains(pte_nomap);
    return absl::FailedPreconditionError(fmt::format(
        "{}: no instructions decoded ({}, {} of trace, {}{}, {}){}{}", path,
        Counted(totals.streams, "stream"), Counted(totals.trace_bytes, "byte"),
        Counted(totals.errors, "decode error"),
        codes.empty() ? "" : ": " + absl::StrJoin(codes, ", "),
        Counted(totals.losses, "loss point"),
        nomap ? "; nomap: the code at the traced addresses was not found (are the recording's "
                "files under --sysroot DIR? `ptdecode insn` names each gap)"
              : "",
        totals.warnings.empty() ? "" : "; the input is incomplete: " + totals.warnings[0]));
  }
  if (!extra.only_under.empty() && profile.totals.instructions == 0) {
    return absl::FailedPreconditionError(
        fmt::format("{}: nothing ran under {} ({} decoded){}{}", path, extra.only_under,
                    Counted(totals.instructions, "instruction"),
                    RootNotTracedReason(extra.only_under, totals.warnings, totals.losses),
                    extra.only_under == "main"
                        ? "; --include-startup counts everything (diff leaves out what runs "
                          "outside main by default)"
                        : ""));
  }
  if (profile.timing) {
    // The trace's cycles, in proportion to the ticks counted (all of them without only_under).
    PTKIT_ASSIGN_OR_RETURN(const uint64_t cycles, CountCycles(recording));
    const uint64_t all = profile.timing->all_ticks;
    profile.timing->cycles = all == 0
                                 ? cycles
                                 : static_cast<uint64_t>(static_cast<unsigned __int128>(cycles) *
                                                         profile.timing->ticks / all);
  }
  return profile;
}

}  // namespace ptkit::decoder
