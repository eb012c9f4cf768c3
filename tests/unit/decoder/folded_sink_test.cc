// `ptdecode folded` (MakeFoldedSink) on hand-made blocks over made-up code: functions of equal
// names, names that begin others ("foo", "foo.cold", "foo:x"), a recursion thousands of frames
// deep. The output is compared with the sort of whole path strings the sink once did (kept
// here as the oracle), over stacks this test tracks itself from its walk.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "decoder/image.h"
#include "decoder/sinks.h"
#include "gtest/gtest.h"
#include "hand_pt.h"
#include "sanitizer.h"
#include "status_matchers.h"
#include "test_io.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::HandBlock;
using ::ptkit::testing::IsOk;
using ::ptkit::testing::kAddressSanitizer;

// Function f's code at kCodeBase + f * kFunctionSize: kCallSlots calls (E8 rel32, 5 bytes each),
// slot s of f calling targets[f][s]; symbol f is names[f].
constexpr uint64_t kCodeBase = 0x10000, kFunctionSize = 0x1000;
constexpr int kCallSlots = 64;

class FoldedProgram {
 public:
  FoldedProgram(std::vector<std::string> names, std::vector<std::vector<int>> targets)
      : names_(std::move(names)), targets_(std::move(targets)) {
    auto image = ProgramImage::Create();
    EXPECT_THAT(image, IsOk());
    image_ = std::move(*image);
    std::vector<uint8_t> code(names_.size() * kFunctionSize);
    std::vector<Symbol> symbols;
    for (size_t f = 0; f < names_.size(); ++f) {
      targets_[f].resize(kCallSlots, 0);
      for (int s = 0; s < kCallSlots; ++s) {
        const uint64_t at = Slot(static_cast<int>(f), s);
        const auto rel =
            static_cast<uint32_t>(kCodeBase + targets_[f][s] * kFunctionSize - (at + 5));
        uint8_t* p = &code[at - kCodeBase];
        p[0] = 0xe8;
        for (int b = 0; b < 4; ++b) p[1 + b] = static_cast<uint8_t>(rel >> (8 * b));
      }
      symbols.push_back({kCodeBase + f * kFunctionSize,
                         kCodeBase + f * kFunctionSize + 5 * kCallSlots, names_[f]});
    }
    image_->AddBytes("code.bin", kCodeBase, code);
    image_->AddSymbols(symbols);
    stack_.push_back({0, 0});
  }
  static uint64_t Slot(int f, int s) { return kCodeBase + f * kFunctionSize + 5 * s; }

  // The function on top calls its current slot's target (the call counts in the caller).
  void Call() {
    auto [f, s] = stack_.back();
    blocks_.push_back(HandBlock(Slot(f, s), Slot(f, s), 1, ptic_call));
    counts_[Path()] += 1;
    stack_.push_back({targets_[f][s], 0});
  }
  // The function on top runs `n` instructions and returns to its caller's next slot.
  void Return(uint16_t n) {
    auto [f, s] = stack_.back();
    blocks_.push_back(HandBlock(Slot(f, s), Slot(f, s), n, ptic_return));
    counts_[Path()] += n;
    stack_.pop_back();
    ++stack_.back().second;
  }
  size_t depth() const { return stack_.size(); }
  int slot() const { return stack_.back().second; }

  // What MakeFoldedSink writes for the blocks so far.
  std::string Folded() const {
    std::FILE* out = std::tmpfile();
    auto sink = MakeFoldedSink(*image_, out, {});
    for (const pt_block& b : blocks_) sink->OnBlock(b);
    EXPECT_THAT(sink->Finish(DecodeTotals{}), IsOk());
    std::string text = ::ptkit::decoder::testing::ReadAll(out);
    EXPECT_EQ(std::fclose(out), 0);
    return text;
  }

  // The folded output as the sink made it before it streamed: every stack's path as one
  // string, the (path, count) pairs sorted.
  std::string OldFolded() const {
    std::vector<std::pair<std::string, uint64_t>> lines;
    for (const auto& [path, count] : counts_) {
      std::string text;
      for (size_t i = 0; i < path.size(); ++i) {
        std::string name = names_[path[i]];
        std::replace(name.begin(), name.end(), ';', ':');
        text += (i == 0 ? "" : ";") + name;
      }
      if (count != 0) lines.emplace_back(text, count);
    }
    std::sort(lines.begin(), lines.end());
    std::string out;
    for (const auto& [path, count] : lines) out += fmt::format("{} {}\n", path, count);
    return out;
  }

 private:
  std::vector<int> Path() const {
    std::vector<int> path;
    for (const auto& frame : stack_) path.push_back(frame.first);
    return path;
  }
  std::vector<std::string> names_;
  std::vector<std::vector<int>> targets_;
  std::unique_ptr<ProgramImage> image_;
  std::vector<pt_block> blocks_;
  std::vector<std::pair<int, int>> stack_;  // (function, slot)
  std::map<std::vector<int>, uint64_t> counts_;
};

// Two functions named foo under main have one path: their lines sort by count, and their
// callees' stacks too. "foo;x" is written "foo:x", as the other foo:x. '.' and ':' sort below
// ';', '<' above: main;foo.cold, its callee and main;foo:x come between main;foo and
// main;foo;g, main;foo<x after it.
TEST(FoldedSinkTest, EqualPathsSortByCountAndLongerNamesBetweenAFunctionAndItsCallees) {
  FoldedProgram p({"main", "foo", "foo", "foo.cold", "g", "foo:x", "foo;x", "foo<x"},
                  {{1, 2, 3, 5, 6, 1, 7}, {4}, {4}, {4}, {}, {}, {}, {}});
  p.Call();  // foo (1)
  p.Call();  // g
  p.Return(2);
  p.Return(3);
  p.Call();  // foo (2)
  p.Call();  // g
  p.Return(1);
  p.Return(1);
  p.Call();  // foo.cold
  p.Call();  // g
  p.Return(1);
  p.Return(2);
  p.Call();  // foo:x
  p.Return(1);
  p.Call();  // foo;x
  p.Return(1);
  p.Call();  // foo (1)
  p.Return(1);
  p.Call();  // foo<x
  p.Return(1);
  const std::string want =
      "main 7\nmain;foo 2\nmain;foo 5\nmain;foo.cold 3\nmain;foo.cold;g 1\nmain;foo:x 1\n"
      "main;foo:x 1\nmain;foo;g 1\nmain;foo;g 2\nmain;foo<x 1\n";
  EXPECT_EQ(p.OldFolded(), want);
  EXPECT_EQ(p.Folded(), want);
}

// Random call trees over functions with short names from ".:;<1fo" (empty, equal, and
// beginning one another), recursion included: the same output as the old sort.
TEST(FoldedSinkTest, RandomTreesOfLookalikeNamesSortAsWholePaths) {
  const std::string alphabet = ".:;<1fo";
  const uint32_t seeds = kAddressSanitizer ? 50 : 200;  // 19 s for 200 under ASan
  for (uint32_t seed = 1; seed <= seeds; ++seed) {
    std::mt19937 rng(seed);
    const int n = 2 + static_cast<int>(rng() % 9);
    std::vector<std::string> names(n);
    std::vector<std::vector<int>> targets(n);
    for (int f = 0; f < n; ++f) {
      const size_t length = rng() % 4;
      for (size_t i = 0; i < length; ++i) names[f] += alphabet[rng() % alphabet.size()];
      for (int s = 0; s < kCallSlots; ++s) targets[f].push_back(static_cast<int>(rng() % n));
    }
    FoldedProgram p(names, targets);
    const size_t max_depth = seed % 10 == 0 ? 300 : 12;
    const uint32_t return_per_100 = seed % 10 == 0 ? 10 : 45;
    for (int step = 0; step < 3000; ++step) {
      const bool must_return = p.slot() >= kCallSlots - 2 || p.depth() >= max_depth;
      if (p.depth() > 1 && (must_return || rng() % 100 < return_per_100)) {
        p.Return(static_cast<uint16_t>(1 + rng() % 3));
      } else if (!must_return) {
        p.Call();
      } else {
        break;  // main's slots are used up
      }
    }
    const std::string want = p.OldFolded(), got = p.Folded();
    if (got != want) {
      const size_t at =
          std::mismatch(got.begin(), got.end(), want.begin(), want.end()).first - got.begin();
      const size_t from = got.rfind('\n', at == 0 ? 0 : at - 1) + 1;  // npos + 1 = 0
      FAIL() << "seed " << seed << ": from byte " << from << " got\n"
             << got.substr(from, 200) << "\nwant\n"
             << want.substr(from, 200);
    }
  }
}

int64_t PeakRssKbOfThisProcess() {
  rusage usage{};
  EXPECT_EQ(getrusage(RUSAGE_SELF, &usage), 0);
  return usage.ru_maxrss;
}

// `call .` 3,000 times under a 100-character name, weighed by time: one tick over 3,000
// instructions goes to the last stack (the others' shares round to 0). Every stack's path as a
// string is 455 MB (3,000^2 / 2 x 101 bytes; the sink made them all at once: 473 MB more peak
// RSS); the output is one line of 303 KB, and writing it needs little more than that line.
TEST(FoldedSinkTest, ADeepRecursionTakesMemoryLinearInItsDepth) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  constexpr uint8_t kCallDot[] = {0xe8, 0xfb, 0xff, 0xff, 0xff};
  const std::string name(100, 'r');
  (*image)->AddBytes("callself.bin", 0x1000, kCallDot);
  (*image)->AddSymbols(std::vector<Symbol>{{0x1000, 0x1005, name}});
  std::FILE* out = std::tmpfile();
  OutputOptions options;
  options.weight = FoldedWeight::kTime;
  options.max_depth = 0;  // every frame
  auto sink = MakeFoldedSink(**image, out, options);
  constexpr int kDepth = 3000;
  sink->OnTime(1);
  for (int i = 0; i < kDepth; ++i) sink->OnBlock(HandBlock(0x1000, 0x1000, 1, ptic_call));
  sink->OnTime(2);
  const int64_t before = PeakRssKbOfThisProcess();
  ASSERT_THAT(sink->Finish(DecodeTotals{}), IsOk());
  const int64_t grown_kb = PeakRssKbOfThisProcess() - before;
  const std::string text = ::ptkit::decoder::testing::ReadAll(out);
  EXPECT_EQ(std::fclose(out), 0);
  std::string want = name;
  for (int i = 1; i < kDepth; ++i) want += ";" + name;
  EXPECT_EQ(text, want + " 1\n");
  EXPECT_LT(grown_kb, 64 * 1024);
}

}  // namespace
}  // namespace ptkit::decoder
