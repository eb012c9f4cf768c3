// ptrecord --kcore: the kernel text from /proc/kcore, /proc/kallsyms, /proc/modules and the
// kernel build-id, and ptdecode decoding kernel code with them.
//  - This machine: the build-id of /sys/kernel/notes against perf's (perf buildid-list -k),
//    _stext/_etext against /proc/kallsyms as awk reads it, and /proc/kcore against gdb, when
//    the kernel has one (CONFIG_PROC_KCORE; the test says so when it has not).
//  - An ELF core file written like /proc/kcore (a PT_LOAD segment at the kernel text address)
//    holding the text of a program linked at 0xffffffff81000000, with its nm output as
//    kallsyms: the captured bytes equal gdb's reading of the core and objcopy's of the
//    program; a synthesized PT trace through that code, stored with the capture and no mmap
//    of the program, decodes to the synthesizer's ground truth with nm's symbol names.
#include <elf.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "ptkit/kallsyms.h"
#include "read_file.h"
#include "record/kcore.h"
#include "record/swpt/synth_container.h"
#include "record/swpt/synthesizer.h"
#include "run_command.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;

const std::string kKernelText = E2E_PROGRAM_DIR "/e2e_kernel_text";

std::string ReadFile(const std::string& path) {
  return ::ptkit::testing::ReadWholeFile<std::string>(path);
}

// The bytes gdb reads at [address, address + n) of core file `core` ("x/Nxb").
std::vector<uint8_t> GdbBytes(const std::string& core, uint64_t address, size_t n) {
  std::ostringstream cmd;
  cmd << "x/" << n << "xb 0x" << std::hex << address;
  auto r = RunCommand({"/usr/bin/gdb", "-nx", "-batch", "-c", core, "-ex", cmd.str()});
  std::vector<uint8_t> bytes;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.rfind("0x", 0) != 0) continue;
    std::istringstream fields(line.substr(colon + 1));
    for (std::string b; fields >> b;)
      bytes.push_back(static_cast<uint8_t>(std::stoul(b, nullptr, 16)));
  }
  return bytes;
}

TEST(KcoreCliTest, TheRunningKernelsBuildIdAndTextRange) {
  const std::string notes = ReadFile("/sys/kernel/notes");
  if (notes.empty()) GTEST_SKIP() << "no /sys/kernel/notes here";
  absl::StatusOr<std::vector<uint8_t>> id = record::ParseBuildIdNote(
      std::span(reinterpret_cast<const uint8_t*>(notes.data()), notes.size()));
  ASSERT_TRUE(id.ok()) << id.status();
  std::string hex;
  for (uint8_t b : *id) hex += fmt::format("{:02x}", b);
  auto perf = RunCommand({"/usr/bin/perf", "buildid-list", "-k"});
  if (perf.exit_code == 0) {
    EXPECT_EQ(hex + "\n", perf.out);  // perf reads /sys/kernel/notes too
  }

  if (geteuid() != 0) GTEST_SKIP() << "kallsyms addresses need root";
  const std::vector<KallsymsEntry> symbols = ParseKallsyms(ReadFile("/proc/kallsyms"));
  absl::StatusOr<KernelText> text = KernelTextRange(symbols);
  ASSERT_TRUE(text.ok()) << text.status();
  auto awk =
      RunCommand({"/usr/bin/awk", "$3==\"_stext\"||$3==\"_etext\" {print $1}", "/proc/kallsyms"});
  EXPECT_EQ(awk.out, fmt::format("{:016x}\n{:016x}\n", text->begin, text->end));

  if (!std::filesystem::exists("/proc/kcore")) {
    absl::StatusOr<record::KernelCapture> c = record::CaptureKernel();
    EXPECT_THAT(c.status().message(), HasSubstr("CONFIG_PROC_KCORE"));
    GTEST_SKIP() << "this kernel has no /proc/kcore (built without CONFIG_PROC_KCORE): its text "
                    "cannot be read here; the core-file path is tested below";
  }
  absl::StatusOr<record::KernelCapture> c = record::CaptureKernel();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text_address, text->begin);
  EXPECT_EQ(c->text.size(), text->end - text->begin);
  EXPECT_EQ(c->build_id, *id);
  const std::vector<uint8_t> gdb = GdbBytes("/proc/kcore", text->begin + 0x1000, 64);
  ASSERT_EQ(gdb.size(), 64u);
  EXPECT_TRUE(std::equal(gdb.begin(), gdb.end(), c->text.begin() + 0x1000));
}

// ptrecord --kcore where the kernel has no /proc/kcore is an error that says so.
TEST(KcoreCliTest, PtrecordSaysWhyItCannotCopyTheKernel) {
  if (std::filesystem::exists("/proc/kcore")) GTEST_SKIP() << "this kernel has /proc/kcore";
  testing::TempDir dir;
  auto r = RunCommand(
      {PTRECORD_PATH, "--sideband-only", "--kcore", "-o", dir.File("k.pt"), "--", "/bin/true"});
  if (r.err.find("Permission denied") != std::string::npos) GTEST_SKIP() << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/proc/kcore does not exist (a kernel built without "
                               "CONFIG_PROC_KCORE)"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("k.pt")));
}

// Without root (a child that became nobody) the error says that root is needed: kallsyms
// hides its addresses from it, or /proc/kcore (here a stand-in in a directory nobody may enter,
// as /proc/kcore is root's alone) cannot be opened. It said "does not exist" for the latter.
TEST(KcoreCliTest, WithoutRootTheErrorSaysRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  testing::TempDir dir;
  const std::string core = dir.File("kcore");
  std::ofstream(core) << "not read";
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    std::string said = "setresuid failed";
    if (setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0) {
      absl::StatusOr<record::KernelCapture> c = record::CaptureKernel({.kcore = core});
      said = c.ok() ? "ok"
                    : absl::StrCat(absl::StatusCodeToString(c.status().code()), ": ",
                                   c.status().message());
    }
    (void)!write(pipe_fds[1], said.data(), said.size());
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) said.append(buf, n);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_THAT(said, HasSubstr("PERMISSION_DENIED: "));
  EXPECT_THAT(said, HasSubstr("root"));
  EXPECT_THAT(said, ::testing::Not(HasSubstr("does not exist")));
}

// Writes an ELF core file as /proc/kcore is laid out: one PT_LOAD at `address` with `bytes`.
void WriteCore(const std::string& path, uint64_t address, std::span<const uint8_t> bytes) {
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_CORE;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_phoff = sizeof(eh);
  eh.e_ehsize = sizeof(eh);
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 1;
  Elf64_Phdr ph{};
  ph.p_type = PT_LOAD;
  ph.p_flags = PF_R | PF_W | PF_X;
  ph.p_offset = 0x1000;
  ph.p_vaddr = address;
  ph.p_filesz = ph.p_memsz = bytes.size();
  ph.p_align = 0x1000;
  std::string out(0x1000, '\0');
  std::memcpy(out.data(), &eh, sizeof(eh));
  std::memcpy(out.data() + sizeof(eh), &ph, sizeof(ph));
  out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::ofstream(path, std::ios::binary) << out;
}

TEST(KcoreCliTest, ASynthesizedTraceThroughCapturedKernelCodeDecodesWithKernelNames) {
  testing::TempDir dir;
  // The program's text, as objcopy extracts it (the oracle for the captured bytes).
  const std::string text_file = dir.File("text.bin");
  ASSERT_EQ(RunCommand({"/usr/bin/objcopy", "-O", "binary", "--only-section=.text", kKernelText,
                        text_file})
                .exit_code,
            0);
  const std::string text = ReadFile(text_file);
  ASSERT_FALSE(text.empty());
  const auto [ksquare, ksquare_end] = testing::NmRange(kKernelText, "ksquare");
  ASSERT_EQ(ksquare, 0xffffffff81000000u);  // the first function, at the text's start
  const uint64_t base = ksquare;
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  const std::string core = dir.File("kcore");
  WriteCore(core, base, bytes);
  EXPECT_EQ(GdbBytes(core, base, bytes.size()), bytes);

  // kallsyms: nm's lines (the same format) and the text's bounds.
  auto nm = RunCommand({"/usr/bin/nm", "-n", kKernelText});
  ASSERT_EQ(nm.exit_code, 0);
  const std::string kallsyms =
      fmt::format("{:016x} T _stext\n{}{:016x} T _etext\n", base, nm.out, base + bytes.size());
  std::ofstream(dir.File("kallsyms")) << kallsyms;
  record::KcorePaths paths{.kcore = core,
                           .kallsyms = dir.File("kallsyms"),
                           .modules = dir.File("no-modules"),
                           .notes = "/sys/kernel/notes"};
  absl::StatusOr<record::KernelCapture> capture = record::CaptureKernel(paths);
  ASSERT_TRUE(capture.ok()) << capture.status();
  EXPECT_EQ(capture->text_address, base);
  EXPECT_EQ(capture->text, bytes);
  EXPECT_TRUE(capture->modules.empty());

  // A walk of the program, stored with the capture (chunks of 32 bytes: several code records)
  // and without any mmap of the program: its code can only come from the capture.
  // The walk reads a copy that is removed before decoding: nothing can read the program then.
  const std::string copy = dir.File("kernel_text");
  std::filesystem::copy_file(kKernelText, copy);
  absl::StatusOr<swpt::Synthesizer> synth = swpt::Synthesizer::Create(copy);
  ASSERT_TRUE(synth.ok()) << synth.status();
  swpt::SynthOptions so;
  so.entry = "kentry";
  so.max_insns = 2000;
  so.seed = 7;
  absl::StatusOr<swpt::SynthResult> walk = synth->Walk(so);
  ASSERT_TRUE(walk.ok()) << walk.status();
  ASSERT_EQ(walk->truth.size(), 2000u) << walk->stop_reason;
  const std::string trace = dir.File("k.pt");
  swpt::SynthContainerOptions co;
  co.map_image = false;
  co.more_records = [&](ContainerWriter& w) { return record::WriteKernelCapture(w, *capture, 32); };
  ASSERT_TRUE(swpt::WriteSynthContainer(trace, synth->image(), so, *walk, co).ok());
  std::filesystem::remove(copy);
  auto dec = RunCommand({PTDECODE_PATH, "insn", trace});
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  const testing::PerThread got = testing::ParseInsn(dec.out);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.begin()->second, walk->truth);
  // Names: nm's function holding each address.
  std::map<uint64_t, std::string> names;  // start -> name
  std::istringstream nm_lines(nm.out);
  for (std::string line; std::getline(nm_lines, line);) {
    std::istringstream f(line);
    std::string address, type, name;
    if (f >> address >> type >> name && (type == "T" || type == "t")) {
      names[std::stoull(address, nullptr, 16)] = name;
    }
  }
  std::istringstream lines(dec.out);
  size_t checked = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.rfind("tid ", 0) == 0 ? 0 : line.find(" tid ");
    if (line.empty() || line[0] == '[' || at == std::string::npos) continue;
    std::istringstream f(line.substr(at + (at == 0 ? 4 : 5)));
    uint64_t tid = 0;
    std::string address, symbol;
    f >> tid >> address >> symbol;
    const uint64_t ip = std::stoull(address, nullptr, 16);
    auto fn = names.upper_bound(ip);
    ASSERT_NE(fn, names.begin());
    --fn;
    EXPECT_EQ(symbol.substr(0, symbol.find('+')), fn->second) << line;
    ++checked;
  }
  EXPECT_EQ(checked, walk->truth.size());
  // kwork and ksquare both ran.
  EXPECT_THAT(dec.out, HasSubstr(" ksquare"));
  EXPECT_THAT(dec.out, HasSubstr(" kwork+0x"));
  auto info = RunCommand({PTDECODE_PATH, "info", trace});
  EXPECT_EQ(info.exit_code, 0) << info.err;
}

}  // namespace
}  // namespace ptkit
