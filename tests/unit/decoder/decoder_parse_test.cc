// Option syntax of raw mode: --elf, --raw, --pages, --cpu.
#include "decoder/image.h"
#include "decoder/trace_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "status_matchers.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ParseElfSpec, FileWithAndWithoutBase) {
  auto a = ParseElfSpec("/usr/lib/libc.so.6");
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->path, "/usr/lib/libc.so.6");
  EXPECT_EQ(a->base, 0u);
  auto b = ParseElfSpec("app:0x7f0000001000");
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(b->path, "app");
  EXPECT_EQ(b->base, 0x7f0000001000u);
  auto c = ParseElfSpec("dir:with:colons/app");  // a non-number after ':' is part of the path
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->path, "dir:with:colons/app");
  EXPECT_THAT(ParseElfSpec(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseRawSpec, AddressRangeAndOffset) {
  auto a = ParseRawSpec("data.dump:0x400000");
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->path, "data.dump");
  EXPECT_EQ(a->from, 0u);
  EXPECT_EQ(a->to, 0u);
  EXPECT_EQ(a->address, 0x400000u);
  auto b = ParseRawSpec("code.bin:0x100:0x401000");
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(b->path, "code.bin");
  EXPECT_EQ(b->from, 0x100u);
  EXPECT_EQ(b->to, 0u);
  EXPECT_EQ(b->address, 0x401000u);
  auto c = ParseRawSpec("code.bin:16-4096:4198400");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->from, 16u);
  EXPECT_EQ(c->to, 4096u);
  EXPECT_EQ(c->address, 4198400u);
}

TEST(ParseRawSpec, BadSyntaxNamesTheText) {
  for (const char* bad :
       {"code.bin", "code.bin:", ":0x1000", "code.bin:0x200-0x100:0x1000", "code.bin:zz"}) {
    EXPECT_THAT(ParseRawSpec(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("FILE[:FROM[-TO]]:ADDRESS")))
        << bad;
  }
}

TEST(ParsePageDumpSpec, DirectoryOrPair) {
  PageDumpSpec a = ParsePageDumpSpec("testdata/Unzip");
  EXPECT_EQ(a.addr_path, "testdata/Unzip/data.addr");
  EXPECT_EQ(a.dump_path, "testdata/Unzip/data.dump");
  PageDumpSpec b = ParsePageDumpSpec("x.addr,y.dump");
  EXPECT_EQ(b.addr_path, "x.addr");
  EXPECT_EQ(b.dump_path, "y.dump");
}

TEST(ParseCpu, FamilyModelStepping) {
  auto cpu = ParseCpu("6/142/10");
  ASSERT_THAT(cpu, IsOk());
  EXPECT_EQ(cpu->vendor, pcv_intel);
  EXPECT_EQ(cpu->family, 6);
  EXPECT_EQ(cpu->model, 142);
  EXPECT_EQ(cpu->stepping, 10);
  auto hex = ParseCpu("0x6/0x55");
  ASSERT_THAT(hex, IsOk());
  EXPECT_EQ(hex->model, 0x55);
  for (const char* bad : {"6", "6/", "6/300", "a/b", "6/1/2/3", ""}) {
    EXPECT_THAT(ParseCpu(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(MakePtConfig, CpuSelectsErrata) {
  uint8_t byte = 0;
  TraceConfig config;
  config.cpu = *ParseCpu("6/61");  // Broadwell: BDM70 and friends
  config.mtc_freq = 3;
  config.cpuid_0x15_eax = 2;
  config.cpuid_0x15_ebx = 84;
  auto pt = MakePtConfig({&byte, 1}, config);
  ASSERT_THAT(pt, IsOk());
  EXPECT_EQ(pt->errata.bdm70, 1u);
  EXPECT_EQ(pt->mtc_freq, 3);
  EXPECT_EQ(pt->cpuid_0x15_ebx, 84u);
  auto none = MakePtConfig({&byte, 1}, TraceConfig{});
  ASSERT_THAT(none, IsOk());
  EXPECT_EQ(none->errata.bdm70, 0u);
}

}  // namespace
}  // namespace ptkit::decoder
