// Runs real programs under the stepper, encodes each thread's events as Intel PT with
// swpt::PtEncoder, decodes that with libipt's instruction decoder (memory from the code bytes
// the stepper read), and checks the decoded instructions equal the stepped ground truth.
#include "record/emulate/stepper.h"

#include <Zydis/Zydis.h>
#include <elf.h>
#include <intel-pt.h>
#include <sys/personality.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "record/swpt/pt_encoder.h"
#include "status_matchers.h"

namespace ptkit::emulate {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using CodeMap = std::map<uint64_t, std::vector<uint8_t>>;

std::string Program(const std::string& name) {
  return std::string(EMULATE_PROGRAM_DIR) + "/emulate_" + name;
}

class EncodingSink : public StepSink {
 public:
  explicit EncodingSink(swpt::PtEncoderOptions options) : options_(options) {}
  struct Thread {
    uint32_t pid = 0;
    std::optional<swpt::PtEncoder> encoder;
    std::vector<uint64_t> truth;
    std::vector<uint8_t> pt;
    bool ended = false;
    uint64_t events = 0;
  };
  void OnThreadStart(uint32_t pid, uint32_t tid) override {
    Thread& t = threads[tid];
    t.pid = pid;
    auto enc = swpt::PtEncoder::Create(options_);
    ASSERT_THAT(enc, IsOk());
    t.encoder.emplace(std::move(*enc));
  }
  void OnEvent(uint32_t tid, const swpt::Event& e) override {
    Thread& t = threads.at(tid);
    ++t.events;
    absl::Status s = t.encoder->Add(e);
    if (!s.ok() && status.ok()) status = s;
  }
  void OnInstruction(uint32_t tid, uint64_t ip) override { threads.at(tid).truth.push_back(ip); }
  void OnThreadEnd(uint32_t tid) override {
    Thread& t = threads.at(tid);
    absl::Status s = t.encoder->Finish();
    if (!s.ok() && status.ok()) status = s;
    t.pt = t.encoder->TakeBytes();
    t.ended = true;
  }
  void OnCode(uint32_t pid, uint32_t, uint64_t ip, std::span<const uint8_t> bytes, bool) override {
    code[pid][ip].assign(bytes.begin(), bytes.end());
  }

  std::map<uint32_t, Thread> threads;
  std::map<uint32_t, CodeMap> code;
  absl::Status status;

 private:
  swpt::PtEncoderOptions options_;
};

int ReadCode(uint8_t* buffer, size_t size, const pt_asid*, uint64_t ip, void* context) {
  const CodeMap& code = *static_cast<const CodeMap*>(context);
  auto it = code.upper_bound(ip);
  if (it == code.begin()) return -pte_nomap;
  --it;
  uint64_t off = ip - it->first;
  if (off >= it->second.size()) return -pte_nomap;
  size_t n = std::min<size_t>(size, it->second.size() - off);
  std::memcpy(buffer, it->second.data() + off, n);
  return static_cast<int>(n);
}

// Decodes with a bare libipt instruction-decoder loop; returns the instruction addresses.
std::vector<uint64_t> DecodeStream(std::vector<uint8_t>& pt, const CodeMap& code, int* errors) {
  std::vector<uint64_t> ips;
  pt_config cfg;
  pt_config_init(&cfg);
  cfg.begin = pt.data();
  cfg.end = pt.data() + pt.size();
  pt_insn_decoder* dec = pt_insn_alloc_decoder(&cfg);
  pt_image* image = pt_insn_get_image(dec);
  pt_image_set_callback(image, ReadCode, const_cast<CodeMap*>(&code));
  *errors = 0;
  for (;;) {
    int status = pt_insn_sync_forward(dec);
    if (status < 0) {
      if (status != -pte_eos) ++*errors;
      break;
    }
    for (;;) {
      while (status & pts_event_pending) {
        pt_event ev;
        status = pt_insn_event(dec, &ev, sizeof(ev));
        if (status < 0) break;
      }
      if (status < 0) break;
      pt_insn insn{};  // unset (ptic_error) when pt_insn_next decodes nothing
      status = pt_insn_next(dec, &insn, sizeof(insn));
      if (insn.iclass != ptic_error) ips.push_back(insn.ip);
      if (status < 0) break;
    }
    if (status == -pte_eos) break;
    ++*errors;
    ADD_FAILURE() << "libipt: " << pt_errstr(pt_errcode(status)) << " after " << ips.size()
                  << " instructions";
    break;
  }
  pt_insn_free_decoder(dec);
  return ips;
}

absl::StatusOr<StepperResult> Step(const std::vector<std::string>& argv, EncodingSink& sink,
                                   const std::string& filter = "") {
  StepperOptions o;
  o.argv = argv;
  if (!filter.empty()) {
    auto filters = record::ParseAddressFilters(filter);
    if (!filters.ok()) return filters.status();
    o.filters = *filters;
  }
  return RunStepped(o, sink);
}

void ExpectDecodesToTruth(EncodingSink& sink) {
  ASSERT_THAT(sink.status, IsOk());
  for (auto& [tid, t] : sink.threads) {
    SCOPED_TRACE(::testing::Message() << "thread " << tid);
    ASSERT_TRUE(t.ended);
    ASSERT_GT(t.truth.size(), 0u);
    int errors = 0;
    std::vector<uint64_t> decoded = DecodeStream(t.pt, sink.code[t.pid], &errors);
    EXPECT_EQ(errors, 0);
    size_t same = 0;
    while (same < decoded.size() && same < t.truth.size() && decoded[same] == t.truth[same]) {
      ++same;
    }
    EXPECT_EQ(same, t.truth.size()) << "first difference at instruction " << same << ": decoded 0x"
                                    << std::hex << (same < decoded.size() ? decoded[same] : 0)
                                    << ", ran 0x" << (same < t.truth.size() ? t.truth[same] : 0);
    EXPECT_EQ(decoded.size(), t.truth.size());
  }
}

class StepperTest : public ::testing::TestWithParam<bool> {
 protected:
  swpt::PtEncoderOptions Options() const {
    swpt::PtEncoderOptions o;
    o.ret_compression = GetParam();
    o.tsc = GetParam();  // ptrecord --emulate's default: return compression and TSC on
    o.psb_period = 0;
    return o;
  }
};

TEST_P(StepperTest, ARecursiveProgramDecodesToExactlyWhatRan) {
  EncodingSink sink(Options());
  auto r = Step({Program("fib"), "x"}, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_status, 3);
  EXPECT_EQ(r->threads, 1u);
  EXPECT_GT(r->instructions, 1000u);
  std::printf("fib: %llu instructions, %llu steps in %.2f s (%.0f steps/s)\n",
              static_cast<unsigned long long>(r->instructions),
              static_cast<unsigned long long>(r->steps), r->seconds, r->steps / r->seconds);
  ExpectDecodesToTruth(sink);
}

TEST_P(StepperTest, EveryThreadHasItsOwnExactStream) {
  EncodingSink sink(Options());
  auto r = Step({Program("threads")}, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_status, 0);
  EXPECT_EQ(r->threads, 3u);
  EXPECT_EQ(sink.threads.size(), 3u);
  ExpectDecodesToTruth(sink);
}

TEST_P(StepperTest, ASignalHandlerIsAnAsynchronousTransfer) {
  EncodingSink sink(Options());
  auto r = Step({Program("signal")}, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_status, 0);
  ExpectDecodesToTruth(sink);
}

TEST_P(StepperTest, AForkedChildIsFollowedAsItsOwnStream) {
  EncodingSink sink(Options());
  auto r = Step({Program("fork")}, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_status, 0);
  EXPECT_EQ(r->threads, 2u);
  std::set<uint32_t> pids;
  for (const auto& [tid, t] : sink.threads) pids.insert(t.pid);
  EXPECT_EQ(pids.size(), 2u);
  ExpectDecodesToTruth(sink);
}

TEST_P(StepperTest, AProcessWhoseMainThreadExitedFirstIsStillRead) {
  // The leader's pthread_exit leaves a zombie leader: code is read through the live thread.
  EncodingSink sink(Options());
  auto r = Step({Program("leader_exit")}, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_status, 0);
  EXPECT_EQ(r->threads, 2u);
  ExpectDecodesToTruth(sink);
}

// --filter: only the region is traced, everything else runs at full speed, and what is traced
// is exactly what an unfiltered run retires inside the region's addresses.
TEST_P(StepperTest, AFilterTracesExactlyTheRegionAndSkipsTheRest) {
  EncodingSink all(Options());
  auto full = Step({Program("fib")}, all);
  ASSERT_THAT(full, IsOk());
  auto fib = record::ParseAddressFilters("filter fib @ " + Program("fib"));
  ASSERT_THAT(fib, IsOk());
  // The whole function, and its first half (exits that fall through or branch mid-function).
  for (uint64_t size : {(*fib)[0].size, (*fib)[0].size / 2}) {
    SCOPED_TRACE(::testing::Message() << "region size " << size);
    EncodingSink sink(Options());
    auto r = Step({Program("fib")}, sink,
                  absl::StrCat("filter 0x", absl::Hex((*fib)[0].offset), "/0x", absl::Hex(size),
                               " @ ", Program("fib")));
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_status, 0);
    ASSERT_EQ(sink.threads.size(), 1u);
    const std::vector<uint64_t>& truth = sink.threads.begin()->second.truth;
    ASSERT_FALSE(truth.empty());
    // The region's run-time addresses: fib is non-PIE-or-not, so take them from the trace and
    // check the unfiltered run retired exactly these instructions inside them.
    const auto [lo, hi] = std::minmax_element(truth.begin(), truth.end());
    std::vector<uint64_t> inside;
    for (uint64_t ip : all.threads.begin()->second.truth) {
      if (ip >= *lo && ip <= *hi) inside.push_back(ip);
    }
    EXPECT_TRUE(inside == truth) << inside.size() << " vs " << truth.size();
    EXPECT_GT(r->fast_forwards, 0u);
    EXPECT_LT(r->steps * 4, full->steps) << "outside the region it should run, not step";
    ExpectDecodesToTruth(sink);
  }
}

// With a clock, every stream carries TSC packets of increasing times (from its opening PSB+
// on), and still decodes to exactly what ran.
TEST(StepperClockTest, StreamsCarryIncreasingTimesAndStillDecodeExactly) {
  swpt::PtEncoderOptions options;
  options.tsc = true;
  EncodingSink sink(options);
  StepperOptions o;
  o.argv = {Program("fib"), "x"};
  uint64_t reads = 0;
  o.clock = [&reads] { return 1000000 + 1000 * ++reads; };
  auto r = RunStepped(o, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_status, 3);
  ASSERT_EQ(sink.threads.size(), 1u);
  for (auto& [tid, t] : sink.threads) {
    pt_config cfg;
    pt_config_init(&cfg);
    cfg.begin = t.pt.data();
    cfg.end = t.pt.data() + t.pt.size();
    pt_packet_decoder* dec = pt_pkt_alloc_decoder(&cfg);
    ASSERT_GE(pt_pkt_sync_set(dec, 0), 0);
    std::vector<uint64_t> times;
    pt_packet p;
    while (pt_pkt_next(dec, &p, sizeof(p)) > 0) {
      if (p.type == ppt_tsc) times.push_back(p.payload.tsc.tsc);
    }
    pt_pkt_free_decoder(dec);
    EXPECT_GT(times.front(), 1000000u);  // the opening PSB+ has the time of the first stop
    // Each PSB+ repeats the current time; the other TSC packets advance it.
    EXPECT_TRUE(std::is_sorted(times.begin(), times.end()));
    times.erase(std::unique(times.begin(), times.end()), times.end());
    EXPECT_GT(times.size(), t.events / 4) << t.events << " events";
    EXPECT_LE(times.back(), 1000000 + 1000 * reads);
  }
  ExpectDecodesToTruth(sink);
}

TEST(StepperProgressTest, ProgressIsReportedAboutOnceASecond) {
  EncodingSink sink({});
  StepperOptions o;
  o.argv = {Program("fib"), "x"};  // about 36,000 steps: 1 to 3 s here
  std::vector<StepperResult> reports;
  o.progress = [&reports](const StepperResult& r) { reports.push_back(r); };
  auto r = RunStepped(o, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_LE(reports.size(), static_cast<size_t>(r->seconds) + 1);
  EXPECT_GE(reports.size(), static_cast<size_t>(r->seconds * 0.5));
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_GT(reports[i].steps, i == 0 ? 0 : reports[i - 1].steps);
    EXPECT_GE(reports[i].seconds, 1.0 * static_cast<double>(i + 1) - 0.01);
    EXPECT_LE(reports[i].instructions, r->instructions);
  }
}

// The executable PT_LOAD segments of `path` as [vaddr, vaddr + filesz), with their file
// offsets: read with <elf.h>, not with ptkit's ELF code.
struct Segment {
  uint64_t vaddr, offset, size;
};
std::vector<Segment> ExecSegments(const std::string& path) {
  std::vector<Segment> out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  Elf64_Ehdr eh{};
  if (std::fread(&eh, sizeof(eh), 1, f) == 1) {
    for (int i = 0; i < eh.e_phnum; ++i) {
      Elf64_Phdr ph{};
      if (std::fseek(f, static_cast<long>(eh.e_phoff + i * sizeof(ph)), SEEK_SET) != 0) break;
      if (std::fread(&ph, sizeof(ph), 1, f) != 1) break;
      if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
        out.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz});
      }
    }
  }
  EXPECT_EQ(std::fclose(f), 0);
  return out;
}

// Turns address-space randomisation off for the workloads this process starts (personality(2)
// is inherited through fork and exec) while it lives. Two runs of a program retire the same
// instructions only then: with ASLR on, the start-up code of libc runs strlen over strings at
// random stack addresses (AT_PLATFORM's), and __strlen_evex takes its page-crossing path
// (3 more instructions) when one lands in a page's last 32 bytes.
class NoAslr {
 public:
  NoAslr() : old_(::personality(0xffffffff)) {
    ok_ = old_ != -1 && ::personality(static_cast<unsigned long>(old_) | ADDR_NO_RANDOMIZE) != -1;
  }
  NoAslr(const NoAslr&) = delete;
  NoAslr& operator=(const NoAslr&) = delete;
  ~NoAslr() {
    if (ok_) ::personality(static_cast<unsigned long>(old_));
  }
  bool ok() const { return ok_; }

 private:
  int old_;
  bool ok_ = false;
};

// The instructions of an unfiltered run (`all`, in order) that a filter traces, by Intel PT's
// rule (SDM, "Filtering by IP"): the regions are checked where the flow changes, so code that
// runs in sequence across a region's edge keeps the state it had until the next branch (the
// stepper follows it: step_events.cc, AppendFilteredStepEvents). An instruction is a branch
// here when Zydis says its category is one; its bytes come from `path`'s executable segments.
std::vector<uint64_t> FilteredRun(const std::vector<uint64_t>& all, const std::string& path,
                                  const std::vector<Segment>& code,
                                  const std::function<bool(uint64_t)>& in_region) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::vector<uint64_t> out;
  if (f == nullptr) return out;
  ZydisDecoder decoder;
  ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  // Whether the instruction at `ip` goes on to `next` in sequence, without a branch.
  auto linear = [&](uint64_t ip, uint64_t next) {
    for (const Segment& s : code) {
      if (ip < s.vaddr || ip >= s.vaddr + s.size) continue;
      uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH] = {};
      if (std::fseek(f, static_cast<long>(ip - s.vaddr + s.offset), SEEK_SET) != 0) return false;
      const size_t n = std::fread(bytes, 1, sizeof(bytes), f);
      ZydisDecodedInstruction insn;
      if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder, nullptr, bytes, n, &insn))) {
        return false;
      }
      switch (insn.meta.category) {
        case ZYDIS_CATEGORY_COND_BR:
        case ZYDIS_CATEGORY_UNCOND_BR:
        case ZYDIS_CATEGORY_CALL:
        case ZYDIS_CATEGORY_RET:
        case ZYDIS_CATEGORY_SYSCALL:
        case ZYDIS_CATEGORY_SYSRET:
        case ZYDIS_CATEGORY_INTERRUPT:
          return false;
        default:
          return next == ip + insn.length;
      }
    }
    return false;
  };
  bool traced = false;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i == 0 || !linear(all[i - 1], all[i])) traced = in_region(all[i]);
    if (traced) out.push_back(all[i]);
  }
  EXPECT_EQ(std::fclose(f), 0);
  return out;
}

// Regions that cover more than the code pages: the whole file ('*') and the first 8 KiB of it
// (the ELF headers' read-only page and the first code page). Arming the code pages makes the
// kernel merge them with the file's read-only neighbours into one mapping: the regions' pages
// must still be recognised as ours there, or they stay non-executable and the program dies of
// SIGSEGV when it gets there. The program is static and not PIE: its run-time addresses are
// its file's. The whole file holds libc's start-up code: the runs are compared without ASLR.
// (Debian's libc 2.36-9+deb12u14 has an instruction across 0x402000 that goes on linearly:
// the 8 KiB region's trace goes on past its end to the next branch, as hardware's would.)
TEST(StepperFilterTest, AWholeFileOrHeaderPageRegionTracesExactlyItsCode) {
  const NoAslr no_aslr;
  if (!no_aslr.ok()) GTEST_SKIP() << "personality(ADDR_NO_RANDOMIZE) is refused here";
  swpt::PtEncoderOptions options;
  options.tsc = true;
  EncodingSink all(options);
  auto full = Step({Program("fib"), "x"}, all);
  ASSERT_THAT(full, IsOk());
  const std::vector<Segment> code = ExecSegments(Program("fib"));
  ASSERT_FALSE(code.empty());
  struct Case {
    std::string filter;
    uint64_t from_offset, to_offset;  // the region, file offsets
  };
  for (const Case& c : {Case{"filter * @ " + Program("fib"), 0, ~0ull},
                        Case{"filter 0x0/0x2000 @ " + Program("fib"), 0, 0x2000}}) {
    SCOPED_TRACE(c.filter);
    EncodingSink sink(options);
    auto r = Step({Program("fib"), "x"}, sink, c.filter);
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_status, 3);
    ASSERT_EQ(sink.threads.size(), 1u);
    const std::vector<uint64_t> inside =
        FilteredRun(all.threads.begin()->second.truth, Program("fib"), code, [&](uint64_t ip) {
          for (const Segment& s : code) {
            const uint64_t off = ip - s.vaddr + s.offset;
            if (ip >= s.vaddr && ip < s.vaddr + s.size && off >= c.from_offset &&
                off < c.to_offset) {
              return true;
            }
          }
          return false;
        });
    ASSERT_FALSE(inside.empty());
    const std::vector<uint64_t>& filtered = sink.threads.begin()->second.truth;
    size_t same = 0;
    while (same < inside.size() && same < filtered.size() && inside[same] == filtered[same]) {
      ++same;
    }
    EXPECT_TRUE(inside == filtered)
        << inside.size() << " vs " << filtered.size() << ", first difference at " << same
        << ": unfiltered 0x" << std::hex << (same < inside.size() ? inside[same] : 0)
        << ", filtered 0x" << (same < filtered.size() ? filtered[same] : 0) << ", before 0x"
        << (same > 0 ? inside[same - 1] : 0);
    ExpectDecodesToTruth(sink);
  }
}

// `cold` shares `hot`'s code page: with a region of `hot` alone, cold's loop (from main and
// from hot) runs at full speed, and the trace is exactly what an unfiltered run retired in
// hot. The instructions of hot do not depend on the loop count.
TEST(StepperFilterTest, CodeOnARegionPageOutsideTheRegionRunsAtFullSpeed) {
  const std::string program = Program("hot_cold");
  auto filters = record::ParseAddressFilters("filter hot @ " + program);
  ASSERT_THAT(filters, IsOk());
  const std::vector<Segment> code = ExecSegments(program);
  ASSERT_EQ(code.size(), 1u);
  const uint64_t hot = (*filters)[0].offset - code[0].offset + code[0].vaddr;
  const uint64_t hot_end = hot + (*filters)[0].size;
  swpt::PtEncoderOptions options;
  options.tsc = true;
  EncodingSink all(options);
  ASSERT_THAT(Step({program, "40"}, all), IsOk());
  std::vector<uint64_t> inside;
  for (uint64_t ip : all.threads.begin()->second.truth) {
    if (ip >= hot && ip < hot_end) inside.push_back(ip);
  }
  ASSERT_GT(inside.size(), 30u);
  for (const char* n : {"40", "4000000"}) {
    SCOPED_TRACE(::testing::Message() << "loop count " << n);
    EncodingSink sink(options);
    StepperOptions o;
    o.argv = {program, n};
    o.filters = *filters;
    o.max_steps = 100000;  // stepping cold's loop would take millions
    auto r = RunStepped(o, sink);
    ASSERT_THAT(r, IsOk());
    EXPECT_FALSE(r->step_limit_hit);
    EXPECT_EQ(r->exit_status, 0);
    EXPECT_LT(r->steps, 1000u);
    ASSERT_EQ(sink.threads.size(), 1u);
    EXPECT_TRUE(sink.threads.begin()->second.truth == inside);
    ExpectDecodesToTruth(sink);
  }
}

TEST_P(StepperTest, AFilterOnALibraryLoadedLaterAndOnThreadsAndForks) {
  {  // the region's file is mapped by dlopen() while the process runs at full speed
    EncodingSink sink(Options());
    const std::string lib = std::string(EMULATE_PROGRAM_DIR) + "/libemulate_plugin.so";
    auto r = Step({Program("dlopen"), lib}, sink, "filter plugin_work @ " + lib);
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_status, 0);
    EXPECT_LT(r->steps, 5000u);
    ExpectDecodesToTruth(sink);
  }
  {  // several threads: all are stepped, each stream holds only the region
    EncodingSink sink(Options());
    auto r = Step({Program("threads")}, sink, "filter work @ " + Program("threads"));
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_status, 0);
    size_t with_trace = 0;
    for (auto& [tid, t] : sink.threads) with_trace += !t.truth.empty();
    EXPECT_EQ(with_trace, 2u);  // the two workers; main never enters work()
    std::erase_if(sink.threads, [](const auto& t) { return t.second.truth.empty(); });
    ExpectDecodesToTruth(sink);
  }
  {  // a fork while running at full speed: the child inherits the armed pages; both processes
     // end in _exit()
    EncodingSink sink(Options());
    auto r = Step({Program("fork")}, sink, "filter _exit @ " + Program("fork"));
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_status, 0);
    EXPECT_EQ(r->threads, 2u);
    EXPECT_LT(r->steps, 20000u);  // both run 20000 iterations of a loop before _exit()
    std::erase_if(sink.threads, [](const auto& t) { return t.second.truth.empty(); });
    ASSERT_EQ(sink.threads.size(), 2u);
    ExpectDecodesToTruth(sink);
  }
}

// Signals every 5 ms while a filtered function is entered and left over and over: they
// land in the region, outside it while running at full speed, and during the injected
// mprotect calls. The trace is still exactly what ran in the region.
TEST_P(StepperTest, SignalsDuringAFilteredRunLoseNothing) {
  EncodingSink sink(Options());
  auto r = Step({Program("alarm")}, sink, "filter hot @ " + Program("alarm"));
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_status, 0);  // the handler saw its 30 signals
  EXPECT_GT(r->fast_forwards, 30u);
  ExpectDecodesToTruth(sink);
}

INSTANTIATE_TEST_SUITE_P(RetCompression, StepperTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

TEST(StepperErrorsTest, AMissingProgramIsNotFound) {
  EncodingSink sink({});
  EXPECT_THAT(Step({"/nonexistent/program"}, sink),
              StatusIs(absl::StatusCode::kNotFound, ::testing::HasSubstr("/nonexistent/program")));
}

TEST(StepperErrorsTest, TheStepLimitStopsEveryProcessOfTheWorkload) {
  // A forked child must be killed too, or the stepper would wait for it forever.
  EncodingSink sink({});
  StepperOptions o;
  o.argv = {Program("fork")};
  o.max_steps = 45000;  // after the fork (startup is ~30k steps), before the end (~130k)
  auto r = RunStepped(o, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->step_limit_hit);
  EXPECT_EQ(r->threads, 2u);
  EXPECT_EQ(r->exit_status, 128 + SIGKILL);
  // Exactly N instructions over both processes (a rep string instruction's iterations are one
  // instruction), as --emulate=qemu counts them; every stream ends.
  EXPECT_EQ(r->instructions, 45000u);
  uint64_t truth = 0;
  for (const auto& [tid, t] : sink.threads) {
    truth += t.truth.size();
    EXPECT_TRUE(t.ended) << tid;
  }
  EXPECT_EQ(truth, 45000u);
  EXPECT_GT(r->steps, r->instructions) << "no rep iterations before the limit";
}

TEST(StepperErrorsTest, AThreadThatExecsKeepsItsStreamAndTheLeaderEnds) {
  EncodingSink sink({});
  auto r = Step({Program("thread_exec"), Program("fib")}, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_status, 0);  // fib without arguments
  ASSERT_EQ(sink.threads.size(), 2u);
  for (const auto& [tid, t] : sink.threads) EXPECT_TRUE(t.ended) << tid;
  // The exec'ing thread's stream goes on into fib: it is the longer one and ends with fib's
  // exit syscall; nothing is left unfinished.
  const EncodingSink::Thread& leader = sink.threads.begin()->second;
  const EncodingSink::Thread& execer = std::next(sink.threads.begin())->second;
  EXPECT_GT(execer.truth.size(), leader.truth.size());
  EXPECT_THAT(sink.status, IsOk());
}

TEST(StepperErrorsTest, TheStepLimitStopsTheWorkload) {
  EncodingSink sink({});
  StepperOptions o;
  o.argv = {Program("fib")};
  o.max_steps = 500;
  auto r = RunStepped(o, sink);
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->step_limit_hit);
  EXPECT_EQ(r->exit_status, 128 + SIGKILL);
  EXPECT_EQ(r->instructions, 500u);
}

}  // namespace
}  // namespace ptkit::emulate
