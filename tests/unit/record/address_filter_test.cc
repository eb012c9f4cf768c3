// perf's address-filter syntax, resolved against this test's own executable: the expected file
// offsets come from /proc/self/maps (the kernel's own view), not from the code under test.
#include "record/address_filter.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "status_matchers.h"
#include "temp_dir.h"

extern "C" __attribute__((noinline, used)) int PtkitFilterTarget(int x) { return x * 3 + 1; }
extern "C" __attribute__((noinline, used)) int PtkitFilterOther(int x) { return x * 5 + 2; }
// An IFUNC symbol, as glibc's memcpy or libm's cos: its address is the resolver's.
extern "C" __attribute__((noinline, used)) int PtkitIfunc_impl(int x) { return x + 7; }
extern "C" __attribute__((used)) int (*PtkitIfuncResolver())(int) { return &PtkitIfunc_impl; }
extern "C" int PtkitIfunc(int x) __attribute__((ifunc("PtkitIfuncResolver")));

namespace ptkit::record {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

std::string SelfPath() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, n) : std::string();
}

// The file offset of `addr` in this executable, as the kernel maps it.
uint64_t FileOffsetOf(const void* addr) {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  char line[4352];
  const auto a = reinterpret_cast<uint64_t>(addr);
  uint64_t offset = ~0ull;
  while (maps != nullptr && std::fgets(line, sizeof(line), maps) != nullptr) {
    unsigned long long start = 0, end = 0, pgoff = 0;
    if (std::sscanf(line, "%llx-%llx %*s %llx", &start, &end, &pgoff) == 3 && a >= start &&
        a < end) {
      offset = a - start + pgoff;
    }
  }
  if (maps != nullptr) {
    EXPECT_EQ(std::fclose(maps), 0);
  }
  return offset;
}

TEST(AddressFilterTest, ASymbolBecomesItsFileOffsetAndSize) {
  const std::string self = SelfPath();
  auto f = ParseAddressFilters("filter PtkitFilterTarget @ " + self);
  ASSERT_THAT(f, IsOk());
  ASSERT_EQ(f->size(), 1u);
  EXPECT_EQ((*f)[0].action, AddressFilter::Action::kFilter);
  EXPECT_EQ((*f)[0].file, self);
  EXPECT_EQ((*f)[0].offset, FileOffsetOf(reinterpret_cast<void*>(&PtkitFilterTarget)));
  EXPECT_GT((*f)[0].size, 0u);
  EXPECT_LT((*f)[0].size, 256u);
  EXPECT_EQ(KernelFilterString(*f), "filter 0x" + absl::StrCat(absl::Hex((*f)[0].offset)) + "/0x" +
                                        absl::StrCat(absl::Hex((*f)[0].size)) + "@" + self);
}

TEST(AddressFilterTest, SizesStartsStopsAndSeveralFilters) {
  const std::string self = SelfPath();
  const uint64_t target = FileOffsetOf(reinterpret_cast<void*>(&PtkitFilterTarget));
  const uint64_t other = FileOffsetOf(reinterpret_cast<void*>(&PtkitFilterOther));
  auto f =
      ParseAddressFilters("filter PtkitFilterTarget/0x10@" + self + ",start PtkitFilterOther @ " +
                          self + " stop 0x1000@" + self + " tracestop 0x2000/0x20@" + self);
  ASSERT_THAT(f, IsOk());
  ASSERT_EQ(f->size(), 4u);
  EXPECT_EQ((*f)[0].offset, target);
  EXPECT_EQ((*f)[0].size, 0x10u);
  EXPECT_EQ((*f)[1].action, AddressFilter::Action::kStart);
  EXPECT_EQ((*f)[1].offset, other);
  EXPECT_EQ((*f)[1].size, 0u);
  EXPECT_EQ((*f)[2].action, AddressFilter::Action::kStop);
  EXPECT_EQ((*f)[2].offset, 0x1000u);
  EXPECT_EQ((*f)[3].action, AddressFilter::Action::kTraceStop);
  EXPECT_EQ((*f)[3].size, 0x20u);
  EXPECT_THAT(KernelFilterString(*f), HasSubstr(",start 0x" + absl::StrCat(absl::Hex(other)) + "@" +
                                                self + ",stop 0x1000@"));
  // A kernel range: numbers only, no file.
  auto k = ParseAddressFilters("filter 0xffffffff81000000/0x1000");
  ASSERT_THAT(k, IsOk());
  EXPECT_EQ(KernelFilterString(*k), "filter 0xffffffff81000000/0x1000");
}

TEST(AddressFilterTest, TheWholeFileWithAStar) {
  auto f = ParseAddressFilters("filter * @ " + SelfPath());
  ASSERT_THAT(f, IsOk());
  const uint64_t target = FileOffsetOf(reinterpret_cast<void*>(&PtkitFilterTarget));
  EXPECT_LE((*f)[0].offset, target);
  EXPECT_GT((*f)[0].offset + (*f)[0].size, target);
}

TEST(AddressFilterTest, MistakesAreErrorsNamingTheFilter) {
  const std::string self = SelfPath();
  EXPECT_THAT(ParseAddressFilters("filter NoSuchSymbolAnywhere @ " + self),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NoSuchSymbolAnywhere")));
  EXPECT_THAT(ParseAddressFilters("filter main @ /no/such/file"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("/no/such/file")));
  EXPECT_THAT(ParseAddressFilters("filter 0x1000@" + self),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a size")));
  EXPECT_THAT(ParseAddressFilters("trace main @ " + self),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'trace'")));
  EXPECT_THAT(ParseAddressFilters("filter main"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a file")));
  EXPECT_THAT(ParseAddressFilters("filter main @ /etc/hostname"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an ELF")));
  EXPECT_THAT(ParseAddressFilters("filter PtkitFilterTarget #9 @ " + self),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has 1 symbols")));
  EXPECT_THAT(ParseAddressFilters(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Numbers are decimal or 0x hex, as perf writes them: a leading 0 is no octal prefix.
// An IFUNC symbol's address is its resolver's, which runs once at load: a filter (or trigger)
// on it would cover the resolver, not the code each call runs (sweep 30a F6). An error says so
// and names the implementations.
TEST(AddressFilterTest, AnIfuncSymbolIsAnErrorNamingItsImplementations) {
  EXPECT_EQ(PtkitIfunc(1), 8);
  const std::string self = SelfPath();
  EXPECT_THAT(ParseAddressFilters("filter PtkitIfunc @ " + self),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'PtkitIfunc' in " + self + " is an IFUNC symbol")));
  EXPECT_THAT(ParseAddressFilters("start PtkitIfunc @ " + self),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(perhaps PtkitIfunc_impl)")));
  EXPECT_THAT(ParseAddressFilters("filter PtkitIfunc_impl @ " + self), IsOk());
}

TEST(AddressFilterTest, NumbersAreDecimalOrHexNeverOctal) {
  const std::string self = SelfPath();
  auto f = ParseAddressFilters("filter 010/8 @ " + self + " filter 08/09 @ " + self +
                               " filter 0x10/0X8 @ " + self);
  ASSERT_THAT(f, IsOk());
  ASSERT_EQ(f->size(), 3u);
  EXPECT_EQ((*f)[0].offset, 10u);
  EXPECT_EQ((*f)[0].size, 8u);
  EXPECT_EQ((*f)[1].offset, 8u);  // a number, not a symbol named "08"
  EXPECT_EQ((*f)[1].size, 9u);
  EXPECT_EQ((*f)[2].offset, 16u);
  EXPECT_EQ((*f)[2].size, 8u);
  EXPECT_THAT(ParseAddressFilters("filter 99999999999999999999/8"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bad number '99999999999999999999' in filter")));
  EXPECT_THAT(ParseAddressFilters("filter 0x1000/12k @ " + self),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad number '12k'")));
}

// A size that takes the range past 2^64 is said to, not taken for an empty symbol.
TEST(AddressFilterTest, ASizeBeyondTheAddressSpaceIsAnOverflowError) {
  const std::string self = SelfPath();
  EXPECT_THAT(ParseAddressFilters("filter PtkitFilterTarget/0xffffffffffffffff @ " + self),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("+ size 0xffffffffffffffff is beyond the 64-bit address space")));
  EXPECT_THAT(ParseAddressFilters("filter 0xffffffffffff0000/0x20000"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("0xffffffffffff0000 + size 0x20000 is beyond")));
}

// An unknown symbol: the error lists what there is, as the man page says.
TEST(AddressFilterTest, AnUnknownSymbolListsSimilarOnes) {
  const std::string self = SelfPath();
  EXPECT_THAT(
      ParseAddressFilters("filter PtkitFilterTragte @ " + self),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("similar: PtkitFilterTarget")));
  // A part of a name finds the names that contain it.
  EXPECT_THAT(ParseAddressFilters("filter PtkitFilter @ " + self),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("PtkitFilterOther, PtkitFilterTarget")));
  EXPECT_THAT(ParseAddressFilters("filter qqqqqqqqqqqqqqqqqqqq @ " + self),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is similar (nm " + self)));
}

// A stripped file: its symbols come from its separate debug file (.gnu_debuglink here; the
// decoder's lookup, as gdb's). The oracle for the offset is the kernel's mapping of the
// unstripped original (stripping moves no loaded byte).
TEST(AddressFilterTest, AStrippedFileUsesItsDebugFile) {
  ::ptkit::testing::TempDir dir;
  const std::string debug = dir.File("self.debug"), stripped = dir.File("self");
  const std::string self = SelfPath();
  if (std::system(("objcopy --only-keep-debug '" + self + "' '" + debug + "' && objcopy " +
                   "--strip-all --add-gnu-debuglink='" + debug + "' '" + self + "' '" + stripped +
                   "'")
                      .c_str()) != 0) {
    GTEST_SKIP() << "objcopy failed (binutils missing?)";
  }
  auto f = ParseAddressFilters("filter PtkitFilterTarget @ " + stripped);
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ((*f)[0].offset, FileOffsetOf(reinterpret_cast<void*>(&PtkitFilterTarget)));
  // Without the debug file, nothing names it, and the error says why.
  std::filesystem::remove(debug);
  EXPECT_THAT(ParseAddressFilters("filter PtkitFilterTarget @ " + stripped),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is stripped (no .symtab) and no debug file was found")));
}

}  // namespace
}  // namespace ptkit::record
