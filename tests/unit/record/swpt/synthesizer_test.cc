#include "record/swpt/synthesizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <intel-pt.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ipt_decode.h"
#include "ptkit/status.h"
#include "status_matchers.h"

namespace ptkit::swpt {
namespace {

using ::ptkit::testing::StatusIs;
using testing::DecodeInsns;

std::string Program(const std::string& name) {
  return std::string(PTKIT_SWPT_PROGRAM_DIR) + "/" + name;
}

struct ProgramSpec {
  std::string file;
  std::vector<std::string> entries;
};

const std::vector<ProgramSpec>& AllPrograms() {
  static const std::vector<ProgramSpec> kPrograms = [] {
    std::vector<ProgramSpec> v;
    for (const char* opt : {"O0", "O2"}) {
      for (const char* pie : {"pie", "nopie"}) {
        v.push_back({std::string("interp_") + opt + "_" + pie, {"main", "run", "eval_tree"}});
        v.push_back({std::string("sorts_") + opt + "_" + pie, {"main", "tokenize", "merge_sort"}});
      }
    }
    return v;
  }();
  return kPrograms;
}

// Synthesizers are cached per program so the decoded-instruction cache is shared by all walks.
Synthesizer& SynthFor(const std::string& file) {
  static std::map<std::string, std::unique_ptr<Synthesizer>> cache;
  auto& slot = cache[file];
  if (!slot) {
    auto s = Synthesizer::Create(Program(file));
    EXPECT_TRUE(s.ok()) << s.status();
    slot = std::make_unique<Synthesizer>(std::move(s).value());
  }
  return *slot;
}

// Where two instruction lists first differ, with some context, for failure messages.
std::string FirstMismatch(const std::vector<uint64_t>& got, const std::vector<uint64_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return "equal";
  std::string s = absl::StrCat("first difference at index ", i, " of ", got.size(), " decoded / ",
                               want.size(), " expected;");
  for (size_t k = i > 3 ? i - 3 : 0; k < i + 3; ++k) {
    absl::StrAppend(&s, " [", k, "] ", k < got.size() ? absl::StrCat(absl::Hex(got[k])) : "-", "/",
                    k < want.size() ? absl::StrCat(absl::Hex(want[k])) : "-");
  }
  return s;
}

// Counts packets of `type` with libipt's packet decoder.
int CountPackets(const std::vector<uint8_t>& pt, pt_packet_type type) {
  pt_config config;
  pt_config_init(&config);
  config.begin = const_cast<uint8_t*>(pt.data());
  config.end = const_cast<uint8_t*>(pt.data()) + pt.size();
  pt_packet_decoder* dec = pt_pkt_alloc_decoder(&config);
  int count = 0;
  if (pt_pkt_sync_forward(dec) >= 0) {
    pt_packet packet;
    while (pt_pkt_next(dec, &packet, sizeof(packet)) > 0) count += packet.type == type;
  }
  pt_pkt_free_decoder(dec);
  return count;
}

TEST(SwptSynthesizerTest, OneWalkDecodesToTheGroundTruth) {
  Synthesizer& synth = SynthFor("interp_O2_pie");
  SynthOptions options;
  options.max_insns = 20000;
  options.seed = 42;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
  EXPECT_EQ(r.stop_reason, "max_insns");
  EXPECT_EQ(r.insns, 20000u);
  ASSERT_EQ(r.truth.size(), 20000u);
  EXPECT_GT(r.branches, 0u);
  auto decoded = DecodeInsns(r.pt, synth.image());
  EXPECT_EQ(decoded.error, 0) << decoded.Describe();
  EXPECT_TRUE(decoded.ips == r.truth) << FirstMismatch(decoded.ips, r.truth);
  EXPECT_EQ(decoded.async_disabled, 1) << decoded.Describe();
}

TEST(SwptSynthesizerTest, WalksAreDeterministicPerSeed) {
  Synthesizer& synth = SynthFor("sorts_O2_nopie");
  SynthOptions options;
  options.max_insns = 5000;
  options.seed = 7;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult a, synth.Walk(options));
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult b, synth.Walk(options));
  options.seed = 8;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult c, synth.Walk(options));
  EXPECT_EQ(a.truth, b.truth);
  EXPECT_EQ(a.pt, b.pt);
  EXPECT_NE(a.truth, c.truth);
}

TEST(SwptSynthesizerTest, MissingEntryIsNotFound) {
  SynthOptions options;
  options.entry = "no_such_function";
  EXPECT_THAT(SynthFor("interp_O0_pie").Walk(options).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Synthesizer::Create("/nonexistent/elf").status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Synthesizer::Create(PTKIT_SOURCE_DIR "/CMakeLists.txt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SwptSynthesizerTest, EveryProgramHasJumpTablesAndLeavesTheImage) {
  for (const ProgramSpec& p : AllPrograms()) {
    SCOPED_TRACE(p.file);
    uint64_t table_jumps = 0, exits = 0, indirect = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      SynthOptions options;
      options.entry = p.entries[seed % p.entries.size()];
      options.max_insns = 5000;
      options.seed = seed;
      options.keep_truth = false;
      PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, SynthFor(p.file).Walk(options));
      table_jumps += r.table_jumps;
      exits += r.exits;
      indirect += r.indirect;
    }
    EXPECT_GT(table_jumps, 0u);
    EXPECT_GT(exits, 0u);
    EXPECT_GT(indirect, table_jumps);
  }
}

TEST(SwptSynthesizerTest, RetCompressionReplacesTips) {
  Synthesizer& synth = SynthFor("interp_O0_nopie");
  SynthOptions options;
  options.max_insns = 20000;
  options.seed = 3;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult comp, synth.Walk(options));
  options.pt.ret_compression = false;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult plain, synth.Walk(options));
  ASSERT_EQ(comp.truth, plain.truth);
  EXPECT_LT(CountPackets(comp.pt, ppt_tip), CountPackets(plain.pt, ppt_tip));
  EXPECT_LT(comp.pt.size(), plain.pt.size());
}

// The acceptance test of issue 5 part 2: 1,000 seeded walks over eight real binaries (-O0/-O2,
// PIE/non-PIE), RET compression on and off, several PSB periods and TNT sizes, some with timing
// packets. A bare libipt instruction decoder must reproduce the ground truth exactly, from the
// start and from PSBs inside the trace.
TEST(SwptSynthesizerTest, ThousandSeededWalksDecodeExactly) {
  constexpr int kWalks = 1000;
  uint64_t total_insns = 0, total_psb_decodes = 0, block_decodes = 0;
  std::map<std::string, int> stops;
  for (int i = 0; i < kWalks; ++i) {
    const ProgramSpec& p = AllPrograms()[i % AllPrograms().size()];
    Synthesizer& synth = SynthFor(p.file);
    SynthOptions options;
    options.seed = 1000 + i;
    options.entry = p.entries[(i / 8) % p.entries.size()];
    options.max_insns = 1000 + (options.seed * 7919) % 15000;
    options.pt.ret_compression = (i / 2) % 2 == 0;
    options.pt.psb_period = static_cast<uint8_t>((i / 4) % 3);
    options.pt.max_tnt_bits = i % 3 == 0 ? 47 : 6;
    if (i % 7 == 0) {
      options.pt.tsc = options.pt.mtc = options.pt.cyc = true;
      options.tick_every = 13;
    }
    if (i % 5 == 1) options.signal_every = 997 + i % 13;
    if (i % 11 == 2) options.overflow_every = 1499;
    SCOPED_TRACE(absl::StrCat("walk ", i, " ", p.file, " entry ", options.entry, " seed ",
                              options.seed, " retcomp ", options.pt.ret_compression, " psb_period ",
                              options.pt.psb_period));
    PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
    ASSERT_EQ(r.truth.size(), r.insns);
    ASSERT_GT(r.insns, 0u);
    ++stops[r.stop_reason.substr(0, r.stop_reason.find(" at "))];
    total_insns += r.insns;

    auto decoded = DecodeInsns(r.pt, synth.image());
    ASSERT_EQ(decoded.error, 0) << decoded.Describe();
    ASSERT_TRUE(decoded.ips == r.truth)
        << decoded.Describe() << "; " << FirstMismatch(decoded.ips, r.truth);
    ASSERT_EQ(decoded.overflows, static_cast<int>(r.overflows)) << decoded.Describe();
    if (i % 4 == 3) {
      // The block decoder (the product decoder's default) agrees too.
      auto blocks = testing::DecodeBlocks(r.pt, synth.image());
      ASSERT_EQ(blocks.error, 0) << blocks.Describe();
      ASSERT_TRUE(blocks.ips == r.truth)
          << blocks.Describe() << "; " << FirstMismatch(blocks.ips, r.truth);
      ++block_decodes;
    }

    // From the last PSB and one in the middle: exactly the rest of the truth.
    ASSERT_FALSE(r.psbs.empty());
    for (size_t k : {r.psbs.size() - 1, r.psbs.size() / 2}) {
      const SynthPsb& psb = r.psbs[k];
      auto rest = DecodeInsns(r.pt, synth.image(), psb.offset);
      ASSERT_EQ(rest.error, 0) << "psb " << k << " " << rest.Describe();
      std::vector<uint64_t> want(r.truth.begin() + psb.insn_index, r.truth.end());
      ASSERT_TRUE(rest.ips == want)
          << "psb " << k << " at " << psb.offset << ": " << FirstMismatch(rest.ips, want);
      ++total_psb_decodes;
    }
  }
  // Most walks run to the instruction limit; the rest hit a stop instruction (e.g. ud2).
  EXPECT_GT(stops["max_insns"], kWalks / 2);
  RecordProperty("instructions", static_cast<int>(total_insns));
  RecordProperty("psb_decodes", static_cast<int>(total_psb_decodes));
  EXPECT_EQ(block_decodes, kWalks / 4u);
}

TEST(SwptSynthesizerTest, SignalsAndOverflowsDecodeExactly) {
  for (const char* file : {"interp_O0_pie", "sorts_O2_nopie"}) {
    SynthOptions options;
    options.seed = 5;
    options.max_insns = 50000;
    options.signal_every = 701;
    options.overflow_every = 2003;
    PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, SynthFor(file).Walk(options));
    EXPECT_EQ(r.signals, r.insns / 701) << file;
    EXPECT_GE(r.overflows, r.insns / 2003 - 2) << file;
    EXPECT_LE(r.overflows, r.insns / 2003) << file;
    auto decoded = DecodeInsns(r.pt, SynthFor(file).image());
    EXPECT_EQ(decoded.error, 0) << decoded.Describe();
    EXPECT_TRUE(decoded.ips == r.truth) << file << ": " << FirstMismatch(decoded.ips, r.truth);
    EXPECT_EQ(decoded.overflows, static_cast<int>(r.overflows));
    EXPECT_GE(decoded.async_disabled, 1);  // User-only signal delivery and the trace end.
  }
}

TEST(SwptSynthesizerTest, StrippedImageAndEntryByAddressOrRandom) {
  Synthesizer& stripped = SynthFor("interp_O2_pie_stripped");
  ASSERT_TRUE(stripped.image().functions().empty());
  SynthOptions options;
  options.max_insns = 30000;
  EXPECT_THAT(stripped.Walk(options).status(), StatusIs(absl::StatusCode::kNotFound));
  options.entry = "*";  // Random functions found through direct calls.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    options.seed = seed;
    PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, stripped.Walk(options));
    EXPECT_GT(r.insns, 0u);
    auto decoded = DecodeInsns(r.pt, stripped.image());
    EXPECT_EQ(decoded.error, 0) << decoded.Describe();
    EXPECT_TRUE(decoded.ips == r.truth) << FirstMismatch(decoded.ips, r.truth);
  }
  // By address: the same walk as by name on the unstripped build.
  Synthesizer& named = SynthFor("interp_O2_pie");
  SynthOptions by_name;
  by_name.entry = "run";
  by_name.max_insns = 5000;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult a, named.Walk(by_name));
  SynthOptions by_address = by_name;
  by_address.entry = absl::StrCat("0x", absl::Hex(*named.image().FunctionAddress("run")));
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult b, named.Walk(by_address));
  EXPECT_EQ(a.truth, b.truth);
  by_address.entry = "0x10";
  EXPECT_THAT(named.Walk(by_address).status(), StatusIs(absl::StatusCode::kNotFound));
}

// Parallel decoding: starting at ANY PSB yields exactly the rest of the ground truth.
TEST(SwptSynthesizerTest, DecodingFromEveryPsbYieldsTheRest) {
  for (const char* file : {"interp_O2_pie", "sorts_O0_nopie"}) {
    for (bool retcomp : {true, false}) {
      Synthesizer& synth = SynthFor(file);
      SynthOptions options;
      options.seed = 99;
      options.max_insns = 400000;
      options.pt.ret_compression = retcomp;
      options.pt.psb_period = 0;
      PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
      ASSERT_GT(r.psbs.size(), 3u) << file;
      for (size_t k = 0; k < r.psbs.size(); ++k) {
        auto rest = DecodeInsns(r.pt, synth.image(), r.psbs[k].offset);
        ASSERT_EQ(rest.error, 0) << file << " psb " << k << " " << rest.Describe();
        std::vector<uint64_t> want(r.truth.begin() + r.psbs[k].insn_index, r.truth.end());
        ASSERT_TRUE(rest.ips == want)
            << file << " psb " << k << ": " << FirstMismatch(rest.ips, want);
      }
    }
  }
}

}  // namespace
}  // namespace ptkit::swpt
