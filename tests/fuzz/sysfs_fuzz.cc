// Fuzzes the recorder's reading of sysfs PMU trees (PmuRegistry: type, format/*, caps/*,
// max_nonturbo_ratio, tsc_art_ratio) and what it does with them (Pmu::Cap, DefaultConfig,
// ResolveEvent's cap checks, DescribeEvent, BuildAuxAttr), on a tree built from the input:
//   the first line: an event string, resolved against every PMU of the tree;
//   then entries "@PATH" (a line) followed by the file's contents (up to the next "@" line);
//   PATH is relative to the tree's root, e.g. "@intel_pt/caps/psb_periods".
// Path components are kept to PMU-name characters ("." and ".." dropped), at most 4 deep;
// the tree is a directory under /dev/shm (or /tmp), changed from one input to the next by what
// differs (WriteTree).
// Seeds: tests/data/sysfs in this form, and variants (tests/fuzz/corpus/sysfs/).
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "record/event_spec.h"
#include "record/pmu_registry.h"

namespace {

namespace fs = std::filesystem;
namespace rec = ::ptkit::record;

const fs::path& Root() {
  // Never destroyed: RemoveTree uses it at exit.
  static const fs::path* root = [] {
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) ? "/dev/shm" : "/tmp";
    return new fs::path(base / ("ptkit_sysfs_fuzz." + std::to_string(::getpid())));
  }();
  return *root;
}

// The tree is removed when the fuzzer exits.
struct RemoveTree {
  ~RemoveTree() {
    std::error_code ec;
    fs::remove_all(Root(), ec);
  }
} remove_tree;

// PATH with every component cut to PMU-name characters; empty when nothing is left.
fs::path SafePath(std::string_view path) {
  fs::path out;
  int depth = 0;
  size_t from = 0;
  while (from <= path.size() && depth < 4) {
    size_t to = path.find('/', from);
    if (to == std::string_view::npos) to = path.size();
    std::string part;
    for (char c : path.substr(from, to - from)) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') {
        part += c;
      }
    }
    if (!part.empty() && part != "." && part != "..") {
      out /= part;
      ++depth;
    }
    from = to + 1;
  }
  return out;
}

// The tree an input describes, as writing its entries in order into an empty directory leaves
// it: relative path -> contents, and the directories. A later entry for a path replaces the
// earlier one; an entry whose path is a directory, lies under a file or has a component longer
// than NAME_MAX is dropped (its write would fail).
struct Tree {
  std::map<std::string, std::string> files;
  std::set<std::string> dirs;
};

Tree ParseTree(std::string_view text) {
  Tree tree;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line[0] != '@') continue;
    // The contents: up to the next line that starts with '@'.
    size_t stop = at;
    while (stop < text.size() && text[stop] != '@') {
      const size_t nl = text.find('\n', stop);
      stop = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    at = std::min(at, text.size());
    const std::string_view contents = text.substr(at, stop - at);
    at = stop;
    const fs::path rel = SafePath(line.substr(1));
    if (rel.empty()) continue;
    std::vector<std::string> prefixes;  // the directories above the file
    bool writable = true;
    std::string prefix;
    for (const fs::path& part : rel) {
      writable = writable && part.native().size() <= NAME_MAX && !tree.files.contains(prefix);
      if (!prefix.empty()) prefixes.push_back(prefix);
      prefix += (prefix.empty() ? "" : "/") + part.native();
    }
    if (!writable || tree.dirs.contains(prefix)) continue;
    tree.dirs.insert(prefixes.begin(), prefixes.end());
    tree.files[prefix] = std::string(contents);
  }
  return tree;
}

// Turns the tree on disk from `was` into `now`: removes what went, creates what came, writes the
// files whose contents changed. False when a file operation failed (the tree is then unknown).
bool ApplyTree(const Tree& was, const Tree& now) {
  std::error_code ec;
  for (const auto& [path, contents] : was.files) {
    if (!now.files.contains(path) && !fs::remove(Root() / path, ec)) return false;
  }
  std::vector<std::string> gone;
  for (const std::string& dir : was.dirs) {
    if (!now.dirs.contains(dir)) gone.push_back(dir);
  }
  // Deepest first: a directory is empty when it goes.
  std::sort(gone.begin(), gone.end(), [](const std::string& a, const std::string& b) {
    return std::count(a.begin(), a.end(), '/') > std::count(b.begin(), b.end(), '/');
  });
  for (const std::string& dir : gone) {
    if (!fs::remove(Root() / dir, ec)) return false;
  }
  for (const std::string& dir : now.dirs) {  // a parent sorts before its children
    if (!was.dirs.contains(dir) && !fs::create_directory(Root() / dir, ec)) return false;
  }
  for (const auto& [path, contents] : now.files) {
    const auto old = was.files.find(path);
    if (old != was.files.end() && old->second == contents) continue;
    std::ofstream out(Root() / path, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!out) return false;
  }
  return true;
}

// Makes the tree on disk the one `text` describes. Consecutive inputs differ little, so only the
// difference is written (rewriting the whole tree per input was half of this fuzzer's time); on a
// failure the tree is written again from an empty directory.
void WriteTree(std::string_view text) {
  static Tree* current = nullptr;  // what is on disk; null when unknown
  Tree next = ParseTree(text);
  if (current == nullptr || !ApplyTree(*current, next)) {
    std::error_code ec;
    fs::remove_all(Root(), ec);
    fs::create_directories(Root(), ec);
    delete current;
    current = ApplyTree(Tree{}, next) ? new Tree(std::move(next)) : nullptr;
    return;
  }
  *current = std::move(next);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t nl = text.find('\n');
  const std::string_view event = text.substr(0, nl);
  WriteTree(nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1));
  rec::PmuRegistry registry(Root().string());
  auto names = registry.List();
  if (!names.ok()) return 0;
  auto spec = rec::ParseEventString(event);
  for (size_t i = 0; i < names->size() && i < 8; ++i) {
    const std::string& name = (*names)[i];
    (void)registry.Exists(name);
    auto pmu = registry.Find(name);
    if (!pmu.ok()) continue;
    for (const auto& cap : pmu->caps) {
      (void)pmu->Cap(cap.first);
      (void)pmu->CapOr(cap.first, 0);
    }
    (void)pmu->FormatNames();
    if (auto def = rec::DefaultConfig(*pmu); def.ok()) (void)rec::DescribeEvent(*pmu, *def);
    if (!spec.ok()) continue;
    rec::EventSpec s = *spec;
    s.pmu = pmu->name;
    if (auto resolved = rec::ResolveEvent(*pmu, s); resolved.ok()) {
      (void)rec::DescribeEvent(*pmu, *resolved);
      (void)rec::BuildAuxAttr(*resolved, {});
    }
  }
  return 0;
}
