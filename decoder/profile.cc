#include "decoder/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "ptkit/numbers.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

using Json = nlohmann::ordered_json;

absl::Status FieldError(const std::string& where, std::string_view what) {
  return absl::InvalidArgumentError(
      fmt::format("stats JSON: {}: {} (is it `ptdecode stats --json` output?)", where, what));
}

// The member `key` of object `obj` (at `where`), which must be there.
absl::StatusOr<const Json*> Member(const Json& obj, const std::string& where, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return FieldError(where.empty() ? key : where + "." + key, "missing");
  return &*it;
}

absl::StatusOr<uint64_t> Uint(const Json& obj, const std::string& where, const char* key) {
  PTKIT_ASSIGN_OR_RETURN(const Json* v, Member(obj, where, key));
  if (!v->is_number_unsigned()) {
    return FieldError(where.empty() ? key : where + "." + key,
                      fmt::format("expected an unsigned integer, got {}", v->type_name()));
  }
  return v->get<uint64_t>();
}

absl::StatusOr<std::string> String(const Json& obj, const std::string& where, const char* key) {
  PTKIT_ASSIGN_OR_RETURN(const Json* v, Member(obj, where, key));
  if (!v->is_string()) {
    return FieldError(where.empty() ? key : where + "." + key,
                      fmt::format("expected a string, got {}", v->type_name()));
  }
  return v->get<std::string>();
}

// The array member `key`, each element an object (or, with `strings`, a string).
absl::StatusOr<const Json*> Array(const Json& obj, const char* key, bool strings = false) {
  PTKIT_ASSIGN_OR_RETURN(const Json* v, Member(obj, "", key));
  if (!v->is_array()) {
    return FieldError(key, fmt::format("expected an array, got {}", v->type_name()));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    if (strings ? !(*v)[i].is_string() : !(*v)[i].is_object()) {
      return FieldError(fmt::format("{}[{}]", key, i),
                        fmt::format("expected {}, got {}", strings ? "a string" : "an object",
                                    (*v)[i].type_name()));
    }
  }
  return v;
}

absl::StatusOr<ProfileTotals> TotalsFromJson(const Json& doc) {
  PTKIT_ASSIGN_OR_RETURN(const Json* t, Member(doc, "", "totals"));
  if (!t->is_object()) {
    return FieldError("totals", fmt::format("expected an object, got {}", t->type_name()));
  }
  ProfileTotals totals;
  struct Field {
    const char* key;
    uint64_t ProfileTotals::*member;
  };
  static constexpr Field kFields[] = {
      {"trace_bytes", &ProfileTotals::trace_bytes}, {"instructions", &ProfileTotals::instructions},
      {"blocks", &ProfileTotals::blocks},           {"calls", &ProfileTotals::calls},
      {"returns", &ProfileTotals::returns},         {"syncs", &ProfileTotals::syncs},
      {"errors", &ProfileTotals::errors},           {"gaps", &ProfileTotals::gaps},
      {"streams", &ProfileTotals::streams},         {"losses", &ProfileTotals::losses},
      {"lost_bytes", &ProfileTotals::lost_bytes}};
  for (const Field& f : kFields) {
    PTKIT_ASSIGN_OR_RETURN(totals.*f.member, Uint(*t, "totals", f.key));
  }
  // (Written only when not 0.)
  for (const auto& [key, member] :
       {std::pair{"unknown_size_losses", &ProfileTotals::unknown_size_losses},
        std::pair{"input_warnings", &ProfileTotals::input_warnings}}) {
    if (t->contains(key)) {
      PTKIT_ASSIGN_OR_RETURN(totals.*member, Uint(*t, "totals", key));
    }
  }
  return totals;
}

// "0x..." as stats writes it (ParseUint also takes decimal; the schema says hex).
absl::StatusOr<uint64_t> ParseAddress(const std::string& where, const std::string& text) {
  auto value = ::ptkit::ParseUint(text, ~0ull, where);
  if (!value.ok() || text.rfind("0x", 0) != 0) {
    return FieldError(where, fmt::format("expected \"0x\" and hex digits, got \"{}\"", text));
  }
  return value;
}

}  // namespace

std::string_view CloneBase(std::string_view name,
                           const std::function<bool(std::string_view)>& is_function) {
  constexpr std::string_view kClone = " [clone .";
  constexpr std::string_view kNumbered[] = {"constprop", "isra", "part",
                                            "lto_priv",  "cold", "specialized"};
  auto digits = [](std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
  };
  for (;;) {
    if (name.ends_with(']')) {  // "NAME [clone .isra.0]"
      const size_t at = name.rfind(kClone);
      if (at == std::string_view::npos || at == 0) return name;
      name = name.substr(0, at);
      continue;
    }
    const size_t dot = name.rfind('.');
    if (dot == std::string_view::npos || dot == 0) return name;
    const std::string_view last = name.substr(dot + 1);
    if (last == "cold" || last == "localalias") {
      if (is_function && !is_function(name.substr(0, dot))) return name;
      name = name.substr(0, dot);
      continue;
    }
    if (!digits(last)) return name;
    const size_t word = name.rfind('.', dot - 1);
    if (word == std::string_view::npos || word == 0 ||
        std::find(std::begin(kNumbered), std::end(kNumbered),
                  name.substr(word + 1, dot - word - 1)) == std::end(kNumbered)) {
      return name;
    }
    name = name.substr(0, word);
  }
}

std::string OrdinalBase(std::string_view name, std::vector<uint64_t>* ordinals) {
  std::string out;
  size_t from = 0;
  for (size_t at = name.find('#'); at != std::string_view::npos; at = name.find('#', at + 1)) {
    size_t end = at + 1;
    uint64_t value = 0;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end])) != 0 &&
           end - at <= 19) {
      value = value * 10 + static_cast<uint64_t>(name[end] - '0');
      ++end;
    }
    if (end == at + 1 || end >= name.size() || name[end] != '}') continue;
    out.append(name.substr(from, at + 1 - from));
    from = end;
    if (ordinals != nullptr) ordinals->push_back(value);
  }
  out.append(name.substr(from));
  return out;
}

void SortProfile(Profile& profile) {
  std::vector<ProfileFunction>& rows = profile.functions;
  std::vector<uint32_t> order(rows.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const ProfileFunction& x = rows[a];
    const ProfileFunction& y = rows[b];
    if (x.self != y.self) return x.self > y.self;
    if (x.inclusive != y.inclusive) return x.inclusive > y.inclusive;
    // Then by name, image and address: the same order whatever order the decode met them in
    // (the fast decoder and libipt's meet functions of equal counts in different orders).
    return std::tie(x.function, x.image, x.address, x.calls, x.ticks) <
           std::tie(y.function, y.image, y.address, y.calls, y.ticks);
  });
  std::vector<ProfileFunction> sorted;
  sorted.reserve(rows.size());
  for (uint32_t i : order) sorted.push_back(std::move(rows[i]));
  rows = std::move(sorted);
  std::map<std::string, ProfileImage> images;
  for (const ProfileFunction& fn : rows) {
    ProfileImage& t = images[fn.image];
    t.instructions += fn.self;
    t.calls += fn.calls;
    ++t.functions;
  }
  profile.images.clear();
  for (auto& [name, image] : images) {
    image.image = name;
    profile.images.push_back(std::move(image));
  }
}

std::string ProfileToJson(const Profile& p) {
  Json doc;
  doc["schema"] = kProfileSchema;
  doc["trace"] = p.trace;
  // Members added after the first version: only when they say something.
  if (!p.only_under.empty()) doc["only_under"] = p.only_under;
  if (p.timing) doc["timing"] = {{"tsc_hz", p.timing->tsc_hz}, {"ticks", p.timing->ticks}};
  if (p.source_files) doc["source_files"] = true;
  const ProfileTotals& t = p.totals;
  doc["totals"] = {{"trace_bytes", t.trace_bytes}, {"instructions", t.instructions},
                   {"blocks", t.blocks},           {"calls", t.calls},
                   {"returns", t.returns},         {"syncs", t.syncs},
                   {"errors", t.errors},           {"gaps", t.gaps},
                   {"streams", t.streams},         {"losses", t.losses},
                   {"lost_bytes", t.lost_bytes}};
  if (t.unknown_size_losses != 0) doc["totals"]["unknown_size_losses"] = t.unknown_size_losses;
  if (t.input_warnings != 0) doc["totals"]["input_warnings"] = t.input_warnings;
  Json errors = Json::object();
  for (const auto& [name, count] : p.errors) errors[name] = count;
  doc["errors"] = errors;
  Json images = Json::array();
  for (const ProfileImage& image : p.images) {
    images.push_back({{"image", image.image},
                      {"instructions", image.instructions},
                      {"calls", image.calls},
                      {"functions", image.functions}});
  }
  doc["images"] = images;
  Json functions = Json::array();
  for (const ProfileFunction& fn : p.functions) {
    Json row = {{"function", fn.function},
                {"image", fn.image},
                {"address", fmt::format("{:#x}", fn.address)},
                {"self", fn.self},
                {"inclusive", fn.inclusive},
                {"calls", fn.calls}};
    if (p.timing) row["ticks"] = fn.ticks;
    if (p.source_files) row["source"] = fn.source;
    if (!fn.code.empty()) row["code"] = fn.code;
    functions.push_back(std::move(row));
  }
  doc["functions"] = functions;
  doc["warnings"] = p.warnings;
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

absl::StatusOr<Profile> ProfileFromJson(std::string_view text) {
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(
        fmt::format("stats JSON: not valid JSON at byte {}: {}", e.byte, e.what()));
  }
  if (!doc.is_object()) {
    return FieldError("(document)", fmt::format("expected an object, got {}", doc.type_name()));
  }
  PTKIT_ASSIGN_OR_RETURN(std::string schema, String(doc, "", "schema"));
  if (schema != kProfileSchema) {
    return absl::InvalidArgumentError(fmt::format(
        "stats JSON: schema \"{}\" is not one this ptdecode reads ({}); decode the trace with "
        "this version's `ptdecode stats --json`",
        schema, kProfileSchema));
  }
  Profile p;
  PTKIT_ASSIGN_OR_RETURN(p.trace, String(doc, "", "trace"));
  if (doc.contains("only_under")) {
    PTKIT_ASSIGN_OR_RETURN(p.only_under, String(doc, "", "only_under"));
  }
  if (auto timing = doc.find("timing"); timing != doc.end()) {
    if (!timing->is_object()) {
      return FieldError("timing", fmt::format("expected an object, got {}", timing->type_name()));
    }
    PTKIT_ASSIGN_OR_RETURN(const Json* hz, Member(*timing, "timing", "tsc_hz"));
    if (!hz->is_number() || hz->get<double>() < 0) {
      return FieldError("timing.tsc_hz", "expected a number >= 0");
    }
    p.timing = ProfileTiming{hz->get<double>()};
    PTKIT_ASSIGN_OR_RETURN(p.timing->ticks, Uint(*timing, "timing", "ticks"));
  }
  if (auto sources = doc.find("source_files"); sources != doc.end()) {
    if (!sources->is_boolean()) {
      return FieldError("source_files",
                        fmt::format("expected true or false, got {}", sources->type_name()));
    }
    p.source_files = sources->get<bool>();
  }
  PTKIT_ASSIGN_OR_RETURN(p.totals, TotalsFromJson(doc));
  PTKIT_ASSIGN_OR_RETURN(const Json* errors, Member(doc, "", "errors"));
  if (!errors->is_object()) {
    return FieldError("errors", fmt::format("expected an object, got {}", errors->type_name()));
  }
  for (const auto& [name, count] : errors->items()) {
    if (!count.is_number_unsigned()) {
      return FieldError("errors." + name,
                        fmt::format("expected an unsigned integer, got {}", count.type_name()));
    }
    p.errors.emplace_back(name, count.get<uint64_t>());
  }
  PTKIT_ASSIGN_OR_RETURN(const Json* images, Array(doc, "images"));
  for (size_t i = 0; i < images->size(); ++i) {
    const Json& j = (*images)[i];
    const std::string where = fmt::format("images[{}]", i);
    ProfileImage image;
    PTKIT_ASSIGN_OR_RETURN(image.image, String(j, where, "image"));
    PTKIT_ASSIGN_OR_RETURN(image.instructions, Uint(j, where, "instructions"));
    PTKIT_ASSIGN_OR_RETURN(image.calls, Uint(j, where, "calls"));
    PTKIT_ASSIGN_OR_RETURN(image.functions, Uint(j, where, "functions"));
    p.images.push_back(std::move(image));
  }
  PTKIT_ASSIGN_OR_RETURN(const Json* functions, Array(doc, "functions"));
  for (size_t i = 0; i < functions->size(); ++i) {
    const Json& j = (*functions)[i];
    const std::string where = fmt::format("functions[{}]", i);
    ProfileFunction fn;
    PTKIT_ASSIGN_OR_RETURN(fn.function, String(j, where, "function"));
    PTKIT_ASSIGN_OR_RETURN(fn.image, String(j, where, "image"));
    PTKIT_ASSIGN_OR_RETURN(std::string address, String(j, where, "address"));
    PTKIT_ASSIGN_OR_RETURN(fn.address, ParseAddress(where + ".address", address));
    PTKIT_ASSIGN_OR_RETURN(fn.self, Uint(j, where, "self"));
    PTKIT_ASSIGN_OR_RETURN(fn.inclusive, Uint(j, where, "inclusive"));
    PTKIT_ASSIGN_OR_RETURN(fn.calls, Uint(j, where, "calls"));
    // With timing (source files), every function has its ticks (source).
    if (p.timing) {
      PTKIT_ASSIGN_OR_RETURN(fn.ticks, Uint(j, where, "ticks"));
    }
    if (p.source_files) {
      PTKIT_ASSIGN_OR_RETURN(fn.source, String(j, where, "source"));
    }
    if (j.contains("code")) {
      PTKIT_ASSIGN_OR_RETURN(fn.code, String(j, where, "code"));
    }
    p.functions.push_back(std::move(fn));
  }
  PTKIT_ASSIGN_OR_RETURN(const Json* warnings, Array(doc, "warnings", true));
  for (const Json& w : *warnings) p.warnings.push_back(w.get<std::string>());
  return p;
}

}  // namespace ptkit::decoder
