#include "record/pmu_registry.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "ptkit/bit_field.h"
#include "ptkit/numbers.h"
#include "ptkit/status.h"
#include "record/text_util.h"

namespace ptkit::record {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadTrimmed(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return ErrnoStatus(errno, "read ", path.native());
  std::stringstream ss;
  ss << in.rdbuf();
  return std::string(Strip(ss.str()));
}

absl::StatusOr<uint32_t> ParseU32File(const fs::path& path) {
  PTKIT_ASSIGN_OR_RETURN(std::string text, ReadTrimmed(path));
  uint32_t v = 0;
  if (!ParseUnsigned(text, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": expected an unsigned integer, got \"", text, "\""));
  }
  return v;
}

}  // namespace

int FormatField::width() const { return std::popcount(mask); }

uint64_t FormatField::max_value() const {
  const int w = width();
  return w >= 64 ? ~uint64_t{0} : (uint64_t{1} << w) - 1;
}

// perf's pmu_format_value(): value bit i goes to the i-th set bit of the mask, lowest first.
absl::StatusOr<uint64_t> FormatField::Apply(uint64_t word_value, uint64_t value) const {
  if (value > max_value()) {
    return absl::OutOfRangeError(absl::StrCat("value ", value, " does not fit in ", width(),
                                              " bit(s) (max ", max_value(), ")"));
  }
  uint64_t out = word_value & ~mask;
  uint64_t m = mask;
  for (int i = 0; m != 0; ++i) {
    const uint64_t bit = m & -m;
    if ((value >> i) & 1) out |= bit;
    m &= m - 1;
  }
  return out;
}

uint64_t FormatField::Extract(uint64_t word_value) const {
  return ExtractBitField(word_value, mask);
}

// Grammar (tools/perf/util/pmu.y): WORD ':' BITS, BITS = BIT (',' BIT)*, BIT = N | N '-' N.
absl::StatusOr<FormatField> ParseFormatSpec(std::string_view spec) {
  const std::string_view text = Strip(spec);
  const size_t colon = text.find(':');
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad format spec \"", std::string(text), "\": ", std::string(why),
                     " (expected e.g. config:10, config:14-17, config1:0-3)"));
  };
  if (colon == std::string_view::npos) return bad("no ':'");
  FormatField field;
  const std::string_view word = text.substr(0, colon);
  if (word == "config") {
    field.word = ConfigWord::kConfig;
  } else if (word == "config1") {
    field.word = ConfigWord::kConfig1;
  } else if (word == "config2") {
    field.word = ConfigWord::kConfig2;
  } else {
    return bad(absl::StrCat("unknown word \"", std::string(word), "\""));
  }
  for (std::string_view part : Split(text.substr(colon + 1), ',')) {
    part = Strip(part);
    uint32_t lo = 0, hi = 0;
    const size_t dash = part.find('-');
    if (dash == std::string_view::npos) {
      if (!ParseUnsigned(part, &lo))
        return bad(absl::StrCat("bad bit \"", std::string(part), "\""));
      hi = lo;
    } else if (!ParseUnsigned(part.substr(0, dash), &lo) ||
               !ParseUnsigned(part.substr(dash + 1), &hi)) {
      return bad(absl::StrCat("bad range \"", std::string(part), "\""));
    }
    if (hi > 63) return bad(absl::StrCat("bit ", hi, " above 63"));
    if (lo > hi) return bad(absl::StrCat("reversed range \"", std::string(part), "\""));
    for (uint32_t b = lo; b <= hi; ++b) field.mask |= uint64_t{1} << b;
  }
  if (field.mask == 0) return bad("no bits");
  return field;
}

absl::StatusOr<uint64_t> Pmu::Cap(std::string_view cap) const {
  auto it = caps.find(std::string(cap));
  if (it == caps.end()) {
    return absl::NotFoundError(absl::StrCat(name, " has no capability \"", std::string(cap), "\" (",
                                            dir, "/caps/", std::string(cap), ")"));
  }
  uint64_t v = 0;
  if (!ParseUnsigned(it->second, &v, 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/caps/", std::string(cap), ": not a hex number: \"", it->second, "\""));
  }
  return v;
}

uint64_t Pmu::CapOr(std::string_view cap, uint64_t fallback) const {
  absl::StatusOr<uint64_t> v = Cap(cap);
  return v.ok() ? *v : fallback;
}

std::string Pmu::FormatNames() const {
  std::vector<std::string_view> names;
  for (const auto& [n, f] : formats) names.push_back(n);
  return fmt::format("{}", fmt::join(names, ", "));
}

PmuRegistry::PmuRegistry(std::string root) : root_(std::move(root)) {}

bool IsPmuName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

bool PmuRegistry::Exists(std::string_view name) const {
  if (!IsPmuName(name)) return false;
  std::error_code ec;
  return fs::exists(fs::path(root_) / std::string(name) / "type", ec);
}

absl::StatusOr<std::vector<std::string>> PmuRegistry::List() const {
  std::error_code ec;
  fs::directory_iterator it(root_, ec);
  if (ec) return ErrnoStatus(ec.value(), "list PMUs in ", root_);
  std::vector<std::string> names;
  for (const fs::directory_entry& e : it) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<Pmu> PmuRegistry::Find(std::string_view name) const {
  if (!IsPmuName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", std::string(name),
                     "\" is not a PMU name (letters, digits, '_', '-' and '.'; e.g. intel_pt)"));
  }
  const fs::path dir = fs::path(root_) / std::string(name);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("no ", std::string(name), " PMU (", dir.string(), " does not exist)"));
  }
  Pmu pmu;
  pmu.name = std::string(name);
  pmu.dir = dir.string();
  PTKIT_ASSIGN_OR_RETURN(pmu.type, ParseU32File(dir / "type"));

  for (const char* sub : {"format", "caps"}) {
    const fs::path subdir = dir / sub;
    if (!fs::is_directory(subdir, ec)) continue;
    for (const fs::directory_entry& e : fs::directory_iterator(subdir, ec)) {
      if (!e.is_regular_file(ec)) continue;
      PTKIT_ASSIGN_OR_RETURN(std::string text, ReadTrimmed(e.path()));
      const std::string key = e.path().filename().string();
      if (sub[0] == 'f') {
        absl::StatusOr<FormatField> f = ParseFormatSpec(text);
        if (!f.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(e.path().string(), ": ", f.status().message()));
        }
        pmu.formats.emplace(key, *f);
      } else {
        pmu.caps.emplace(key, std::move(text));
      }
    }
  }

  // intel_pt's extra attributes (arch/x86/events/intel/pt.c: max_nonturbo_ratio "%u",
  // tsc_art_ratio "%u:%u"). Absent on other PMUs.
  if (fs::exists(dir / "max_nonturbo_ratio", ec)) {
    PTKIT_ASSIGN_OR_RETURN(pmu.max_nonturbo_ratio, ParseU32File(dir / "max_nonturbo_ratio"));
  }
  if (fs::exists(dir / "tsc_art_ratio", ec)) {
    PTKIT_ASSIGN_OR_RETURN(std::string text, ReadTrimmed(dir / "tsc_art_ratio"));
    std::vector<std::string_view> parts = Split(text, ':');
    uint32_t num = 0, den = 0;
    if (parts.size() != 2 || !ParseUnsigned(parts[0], &num) || !ParseUnsigned(parts[1], &den)) {
      return absl::InvalidArgumentError(absl::StrCat((dir / "tsc_art_ratio").string(),
                                                     ": expected \"num:den\", got \"", text, "\""));
    }
    pmu.tsc_art_numerator = num;
    pmu.tsc_art_denominator = den;
  }
  return pmu;
}

}  // namespace ptkit::record
