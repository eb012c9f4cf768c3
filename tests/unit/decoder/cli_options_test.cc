// ptdecode's flags as the command line gives them (CLI11 parsing the registered flags), and
// their translation into decoder options (decoder/cli_options.h).
#include "decoder/cli_options.h"

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "status_matchers.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Parses `args` (after the program name) with the flags `add` registers; true when CLI11
// accepted them.
template <typename AddFlags>
bool Parse(std::vector<std::string> args, AddFlags add) {
  CLI::App app{"test", "ptdecode"};
  add(app);
  args.insert(args.begin(), "ptdecode");
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (std::string& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return false;
  }
  return true;
}

DecodeFlags Decode(std::vector<std::string> args, DecodeFlagSet set = {}) {
  DecodeFlags f;
  EXPECT_TRUE(Parse(std::move(args), [&](CLI::App& app) { AddDecodeFlags(app, f, set); }));
  return f;
}

TEST(RawInputSpecFromFlags, RawTraceWithImagesAndTheRecordingCpu) {
  auto spec = RawInputSpecFromFlags(
      Decode({"--pt", "t.pt", "--elf", "a.elf:0x401000", "--elf", "b.elf", "--raw", "r.bin:0x1000",
              "--cpu", "6/85/4", "--mtc-freq", "3", "--nom-freq", "40", "--cpuid-0x15.eax", "2",
              "--cpuid-0x15.ebx", "170"}));
  ASSERT_THAT(spec.status(), IsOk());
  EXPECT_EQ(spec->pt_path, "t.pt");
  EXPECT_FALSE(spec->bts);
  ASSERT_EQ(spec->elfs.size(), 2u);
  EXPECT_EQ(spec->elfs[0].path, "a.elf");
  EXPECT_EQ(spec->elfs[0].base, 0x401000u);
  EXPECT_EQ(spec->elfs[1].path, "b.elf");
  ASSERT_EQ(spec->raws.size(), 1u);
  ASSERT_TRUE(spec->config.cpu.has_value());
  EXPECT_EQ(spec->config.cpu->family, 6);
  EXPECT_EQ(spec->config.cpu->model, 85);
  EXPECT_EQ(spec->config.cpu->stepping, 4);
  EXPECT_EQ(spec->config.mtc_freq, 3);
  EXPECT_EQ(spec->config.nom_freq, 40);
  EXPECT_EQ(spec->config.cpuid_0x15_eax, 2u);
  EXPECT_EQ(spec->config.cpuid_0x15_ebx, 170u);
}

TEST(RawInputSpecFromFlags, Bts) {
  auto spec = RawInputSpecFromFlags(Decode({"--bts", "b.aux"}));
  ASSERT_THAT(spec.status(), IsOk());
  EXPECT_EQ(spec->pt_path, "b.aux");
  EXPECT_TRUE(spec->bts);
  EXPECT_FALSE(spec->config.cpu.has_value());
}

TEST(RawInputSpecFromFlags, UsageErrors) {
  EXPECT_THAT(RawInputSpecFromFlags(Decode({"--pt", "a", "--bts", "b"})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "give either --pt or --bts, not both"));
  EXPECT_THAT(RawInputSpecFromFlags(Decode({})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "no input: give a trace.pt FILE, --pt FILE or --bts FILE"));
  for (auto filter :
       std::vector<std::vector<std::string>>{{"--tid", "5"}, {"--snapshot", "0"}, {"--cpu", "3"}}) {
    filter.insert(filter.begin(), {"--pt", "a"});
    EXPECT_THAT(RawInputSpecFromFlags(Decode(filter)).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("filter trace.pt streams; a raw trace has one")))
        << filter.back();
  }
  EXPECT_THAT(RawInputSpecFromFlags(Decode({"--pt", "a", "--cpu", "6/x"})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cpu model 'x'")));
}

TEST(DefaultBuildIdDir, AsPerf) {
  EXPECT_EQ(DefaultBuildIdDir("/cache", "/home/u"), "/cache");
  EXPECT_EQ(DefaultBuildIdDir(nullptr, "/home/u"), "/home/u/.debug");
  EXPECT_EQ(DefaultBuildIdDir("", "/home/u"), "/home/u/.debug");
  EXPECT_EQ(DefaultBuildIdDir(nullptr, ""), "");
  EXPECT_EQ(DefaultBuildIdDir(nullptr, nullptr), "");
}

// A --sysroot that names no directory is a usage error naming it (sweep 29b U3: it was taken,
// and every file was then "could not be loaded").
TEST(ContainerOptionsFromFlags, ASysrootThatIsNoDirectoryIsAUsageError) {
  auto missing = ContainerOptionsFromFlags(
      Decode({"trace.pt", "--sysroot", "/nonexistent-sysroot"}), "/default");
  EXPECT_THAT(missing.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                         "--sysroot /nonexistent-sysroot: no such directory"));
  auto file = ContainerOptionsFromFlags(Decode({"trace.pt", "--symfs", "/etc/passwd"}), "/default");
  EXPECT_THAT(file.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                      "--sysroot /etc/passwd: not a directory"));
}

TEST(ContainerOptionsFromFlags, Filters) {
  auto options = ContainerOptionsFromFlags(
      Decode({"trace.pt", "--cpu", "2", "--tid", "0x10", "--snapshot", "1", "--sysroot", "/usr"}),
      "/default");
  ASSERT_THAT(options.status(), IsOk());
  EXPECT_EQ(options->sysroot, "/usr");
  EXPECT_EQ(options->buildid_dir, "/default");
  EXPECT_EQ(options->cpu, 2u);
  EXPECT_EQ(options->tid, 16u);
  EXPECT_EQ(options->snapshot, 1u);
  EXPECT_FALSE(options->config.cpu.has_value()) << "no configuration flag: the metadata's";
  EXPECT_FALSE(options->config.mtc_freq.has_value());
}

TEST(ContainerOptionsFromFlags, ConfigurationOverridesTheMetadata) {
  auto options = ContainerOptionsFromFlags(
      Decode({"trace.pt", "--cpu", "6/142", "--buildid-dir", "/mine"}), "/default");
  ASSERT_THAT(options.status(), IsOk());
  EXPECT_EQ(options->buildid_dir, "/mine");
  EXPECT_FALSE(options->cpu.has_value()) << "FAMILY/MODEL is the recording CPU, no filter";
  ASSERT_TRUE(options->config.cpu.has_value());
  EXPECT_EQ(options->config.cpu->model, 142);
  EXPECT_FALSE(options->config.mtc_freq.has_value()) << "the recording's";

  options = ContainerOptionsFromFlags(Decode({"trace.pt", "--mtc-freq", "3"}), "");
  ASSERT_THAT(options.status(), IsOk());
  EXPECT_EQ(options->config.mtc_freq, 3);
  EXPECT_FALSE(options->config.cpu.has_value());
  // 0 is a period too (MTC at every crystal clock tick), given or not.
  options = ContainerOptionsFromFlags(Decode({"trace.pt", "--mtc-freq", "0"}), "");
  ASSERT_THAT(options.status(), IsOk());
  EXPECT_EQ(options->config.mtc_freq, 0);
}

TEST(ContainerOptionsFromFlags, UsageErrors) {
  EXPECT_THAT(ContainerOptionsFromFlags(Decode({"trace.pt", "--elf", "a.elf"}), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--elf, --raw and --pages apply to raw traces (--pt), not to trace.pt"));
  EXPECT_THAT(ContainerOptionsFromFlags(Decode({"trace.pt", "--tid", "x"}), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tid")));
  EXPECT_THAT(ContainerOptionsFromFlags(Decode({"trace.pt", "--cpu", "4294967296"}), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--cpu")));
  EXPECT_THAT(ContainerOptionsFromFlags(Decode({"trace.pt", "--snapshot", "-1"}), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--snapshot")));
}

TEST(TimeWindowFromFlags, Window) {
  auto none = TimeWindowFromFlags(Decode({"trace.pt"}));
  ASSERT_THAT(none.status(), IsOk());
  EXPECT_FALSE(none->has_value());
  auto window = TimeWindowFromFlags(Decode({"trace.pt", "--time", "5,0x10"}));
  ASSERT_THAT(window.status(), IsOk());
  ASSERT_TRUE(window->has_value());
  EXPECT_EQ((*window)->from, 5u);
  EXPECT_EQ((*window)->to, 16u);
}

TEST(TimeWindowFromFlags, UsageErrors) {
  EXPECT_THAT(TimeWindowFromFlags(Decode({"--time", "10"})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "bad --time '10': expected FROM,TO"));
  EXPECT_THAT(TimeWindowFromFlags(Decode({"--time", "10,10"})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad --time '10,10': FROM must be less than TO (the window is [FROM, TO))"));
  EXPECT_THAT(TimeWindowFromFlags(Decode({"--time", "x,10"})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--time FROM")));
  EXPECT_THAT(TimeWindowFromFlags(Decode({"--time", "1,y"})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--time TO")));
}

TEST(AddDecodeFlags, OptionalFlagsOnlyWhereAsked) {
  DecodeFlags f;
  EXPECT_FALSE(Parse({"--disasm"}, [&](CLI::App& app) { AddDecodeFlags(app, f, {}); }));
  EXPECT_FALSE(Parse({"--json"}, [&](CLI::App& app) { AddDecodeFlags(app, f, {.json = false}); }));
  EXPECT_FALSE(Parse({"--weight", "insn"}, [&](CLI::App& app) { AddDecodeFlags(app, f, {}); }));
  EXPECT_FALSE(Parse({"--decoder", "slow"}, [&](CLI::App& app) { AddDecodeFlags(app, f, {}); }));
  EXPECT_FALSE(Parse({"--weight", "cycles"},
                     [&](CLI::App& app) { AddDecodeFlags(app, f, {.weight = true}); }));
  EXPECT_FALSE(Parse({"--mtc-freq", "16"}, [&](CLI::App& app) { AddDecodeFlags(app, f, {}); }));
}

TEST(OutputOptionsFromFlags, Output) {
  DecodeFlags f = Decode({"trace.pt", "--json", "--disasm", "--srcline", "--weight", "time"},
                         {.json = true, .disasm = true, .srcline = true, .weight = true});
  f.top_functions = 20;
  f.list_problems = true;
  OutputOptions out = OutputOptionsFromFlags(f, "trace.pt", TscClock{});
  EXPECT_TRUE(out.json);
  EXPECT_TRUE(out.disasm);
  EXPECT_TRUE(out.srcline);
  EXPECT_EQ(out.weight, FoldedWeight::kTime);
  EXPECT_EQ(out.trace_name, "trace.pt");
  EXPECT_EQ(out.top_functions, 20u);
  EXPECT_TRUE(out.list_problems);
  EXPECT_EQ(OutputOptionsFromFlags(Decode({}), "", TscClock{}).weight, FoldedWeight::kInstructions);
  // stats: --exclude-startup is --only-under main; both together are refused by the parser.
  EXPECT_EQ(OutputOptionsFromFlags(Decode({"t.pt", "--exclude-startup"}, {.only_under = true}), "",
                                   TscClock{})
                .only_under,
            "main");
  EXPECT_EQ(Decode({"t.pt", "--only-under", "bench"}, {.only_under = true}).only_under, "bench");
  DecodeFlags both;
  EXPECT_FALSE(Parse({"t.pt", "--exclude-startup", "--only-under", "f"},
                     [&](CLI::App& app) { AddDecodeFlags(app, both, {.only_under = true}); }));
}

TEST(InfoAndExportFlags, Parsed) {
  InfoFlags info;
  ASSERT_TRUE(
      Parse({"t.pt", "--json", "--decode"}, [&](CLI::App& app) { AddInfoFlags(app, info); }));
  EXPECT_EQ(info.path, "t.pt");
  EXPECT_TRUE(info.json);
  EXPECT_TRUE(info.decode);

  ExportFlags to_container;
  ASSERT_TRUE(Parse({"--to", "trace.pt", "in.data", "-o", "out.pt", "--archive"},
                    [&](CLI::App& app) { AddExportFlags(app, to_container); }));
  EXPECT_EQ(ExportFormatFromFlags(to_container), ExportFormat::kContainer);
  EXPECT_TRUE(to_container.container.archive);
  EXPECT_EQ(to_container.output, "out.pt");
  ExportFlags to_perf;
  ASSERT_TRUE(Parse({"--to", "perf.data", "in.pt", "-o", "out.data"},
                    [&](CLI::App& app) { AddExportFlags(app, to_perf); }));
  EXPECT_EQ(ExportFormatFromFlags(to_perf), ExportFormat::kPerfData);
  ExportFlags bad;
  EXPECT_FALSE(
      Parse({"--to", "ctf", "in.pt", "-o", "x"}, [&](CLI::App& app) { AddExportFlags(app, bad); }));
}

absl::StatusOr<DiffPlan> Diff(std::vector<std::string> args) {
  DiffFlags f;
  EXPECT_TRUE(Parse(std::move(args), [&](CLI::App& app) { AddDiffFlags(app, f); }));
  return DiffPlanFromFlags(f, "");
}

// diff takes --symfs as the other sub-commands do, and a --sysroot that is no directory is a
// usage error there too (sweep 29a F9: "BASE NEW: At Most 2 required but received 3").
TEST(DiffPlanFromFlags, ASysrootThatIsNoDirectoryIsAUsageError) {
  auto diff = Diff({"a.pt", "b.pt", "--symfs", "/nonexistent-sysroot"});
  EXPECT_THAT(diff.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                      "--sysroot /nonexistent-sysroot: no such directory"));
  auto ok = Diff({"a.pt", "b.pt", "--symfs", "/usr"});
  ASSERT_THAT(ok.status(), IsOk());
  EXPECT_EQ(ok->container.sysroot, "/usr");
}

TEST(DiffPlanFromFlags, SidesAndDefaults) {
  auto plan = Diff({"a.pt", "b.pt", "--base", "a2.pt", "--new", "b2.pt", "--sysroot", "/usr"});
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_THAT(plan->base, ElementsAre("a.pt", "a2.pt"));
  EXPECT_THAT(plan->now, ElementsAre("b.pt", "b2.pt"));
  EXPECT_EQ(plan->options.metric, DiffMetric::kSelf);
  EXPECT_EQ(plan->options.group_by, DiffGroup::kFunction);
  EXPECT_EQ(plan->format, DiffFormat::kText);
  EXPECT_FALSE(plan->profile.timing);
  EXPECT_FALSE(plan->options.fail_total_pct.has_value());
  EXPECT_THAT(plan->limits_given, IsEmpty());
  EXPECT_EQ(plan->container.sysroot, "/usr");
  // Several runs after one --base / --new, as a shell glob gives them (--base base-*.pt).
  plan = Diff({"--base", "a1.pt", "a2.pt", "--new", "b1.pt", "b2.pt", "b3.pt"});
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_THAT(plan->base, ElementsAre("a1.pt", "a2.pt"));
  EXPECT_THAT(plan->now, ElementsAre("b1.pt", "b2.pt", "b3.pt"));
  // Only what runs under main, unless --include-startup.
  EXPECT_EQ(plan->profile.only_under, "main");
  EXPECT_EQ(plan->options.only_under, "main");
  plan = Diff({"a", "b", "--include-startup"});
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_EQ(plan->profile.only_under, "");
  EXPECT_EQ(plan->options.only_under, "");
}

TEST(DiffPlanFromFlags, Translation) {
  auto plan = Diff({"a",
                    "b",
                    "--metric",
                    "ipc",
                    "--group-by",
                    "source-file",
                    "--format",
                    "junit",
                    "--fail-total",
                    "2.5",
                    "--min-instructions",
                    "100",
                    "--only-under",
                    "bench",
                    "--limits",
                    "l.json",
                    "--allow",
                    "f",
                    "--allow",
                    "g"});
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_EQ(plan->options.metric, DiffMetric::kIpc);
  EXPECT_TRUE(plan->profile.timing);
  EXPECT_EQ(plan->options.group_by, DiffGroup::kSourceFile);
  EXPECT_TRUE(plan->profile.source_files);
  EXPECT_EQ(plan->format, DiffFormat::kJunit);
  EXPECT_EQ(plan->options.fail_total_pct, 2.5);
  EXPECT_FALSE(plan->options.fail_function_pct.has_value());
  EXPECT_EQ(plan->options.min_instructions, 100u);
  EXPECT_THAT(plan->limits_given, ElementsAre("fail_total", "min_instructions"));
  EXPECT_EQ(plan->limits, "l.json");
  EXPECT_EQ(plan->profile.only_under, "bench");
  EXPECT_THAT(plan->options.allow, ElementsAre("f", "g"));

  plan = Diff({"a", "b", "--exclude-startup", "--metric", "time", "--format", "folded"});
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_EQ(plan->profile.only_under, "main");
  EXPECT_EQ(plan->options.metric, DiffMetric::kTime);
  EXPECT_EQ(plan->format, DiffFormat::kFolded);
}

TEST(DiffPlanFromFlags, UsageErrors) {
  EXPECT_THAT(Diff({"a"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "diff takes BASE and NEW, or --base and --new options"));
  EXPECT_THAT(Diff({"--base", "a"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "diff needs a BASE and a NEW run (trace.pt, perf.data or stats --json "
                       "document)"));
  EXPECT_THAT(Diff({"a", "b", "--exclude-startup", "--only-under", "f"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--exclude-startup is --only-under main: give one of them"));
  EXPECT_THAT(Diff({"a", "b", "--exclude-startup", "--include-startup"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--exclude-startup and --include-startup: give one of them (excluding is "
                       "the default)"));
}

}  // namespace
}  // namespace ptkit::decoder
