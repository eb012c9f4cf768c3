// SPDX-License-Identifier: Apache-2.0
#include "record/emulate/qemu_backend.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "ptkit/container_writer.h"
#include "ptkit/elf_file.h"
#include "ptkit/errno_text.h"
#include "ptkit/status.h"
#include "record/code_capture.h"
#include "record/crash.h"
#include "record/drain_loop.h"
#include "record/emulate/exec_plan.h"
#include "record/emulate/guest_pids.h"
#include "record/emulate/qemu_ring.h"
#include "record/event_spec.h"
#include "record/metadata.h"
#include "record/session.h"
#include "record/status_line.h"
#include "record/workload.h"

namespace ptkit::emulate {
namespace {

// Streams (guest threads, over all processes of the run) the region has room for.
constexpr uint32_t kSlots = 64;
// Each slot's sideband ring (the plugin's MMAP2/COMM/FORK/EXIT/AUX records).
constexpr uint64_t kSlotDataPages = 64;
// The CPU model QEMU presents (CPUID brand "QEMU TCG CPU version 2.5+" in 7.2).
constexpr char kQemuCpu[] = "max";
// ptrecord drains at least this often; the plugin waits when a ring is full.
constexpr int kDrainIntervalMs = 5;
// TNT bits per packet (7..47: TNT-64 packets).
constexpr int kQemuMaxTntBits = 47;

absl::Status Usage(absl::Status s) {
  s.SetPayload(record::kExitCodePayload, absl::Cord("2"));
  return s;
}

// The first line of `qemu --version`: "qemu-x86_64 version 7.2.22 (Debian ...)".
std::string QemuVersion(const std::string& qemu) {
  std::string cmd = absl::StrCat("'", qemu, "' --version 2>/dev/null");
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), &pclose);
  if (!p) return "";
  char line[256] = {};
  if (std::fgets(line, sizeof(line), p.get()) == nullptr) return "";
  absl::string_view v = absl::StripTrailingAsciiWhitespace(line);
  if (size_t at = v.find("version "); at != absl::string_view::npos) v = v.substr(at + 8);
  return std::string(v);
}

// Whether process `pid` runs (not gone, not a zombie): /proc/PID/stat's state.
bool ProcessRuns(uint32_t pid) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(
      std::fopen(absl::StrCat("/proc/", pid, "/stat").c_str(), "r"), &std::fclose);
  if (!f) return false;
  char text[512] = {};
  const size_t n = std::fread(text, 1, sizeof(text) - 1, f.get());
  const char* close = static_cast<const char*>(memrchr(text, ')', n));  // comm may hold ')'
  return close != nullptr && close + 2 < text + n && close[2] != 'Z' && close[2] != 'X';
}

// Whether process `pid` runs the program `exe` (its /proc/PID/exe).
bool RunsQemu(uint32_t pid, const std::string& exe) {
  std::error_code ec;
  const std::filesystem::path target =
      std::filesystem::read_symlink(absl::StrCat("/proc/", pid, "/exe"), ec);
  return !ec && target == exe;
}

}  // namespace

absl::Status CheckQemuPlugin(const std::string& path, bool given) {
  const std::string what = absl::StrCat("the QEMU plugin ", path);
  const std::string rebuild =
      given ? absl::StrCat("give --qemu-plugin the ", kQemuPluginName,
                           " built with this ptrecord (the ptkit_qemu target)")
            : "build the ptkit_qemu target, or give its path with --qemu-plugin";
  absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
  if (!elf.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " is not an ELF file (", elf.status().message(), "): ", rebuild));
  }
  if (elf->type() != ET_DYN || elf->machine() != EM_X86_64 || !elf->is_64bit()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " is not an x86-64 shared object: ", rebuild));
  }
  std::optional<ElfSymbol> abi;
  bool install = false;
  for (const ElfSymbol& s : elf->Symbols()) {
    if (!s.dynamic) continue;
    install |= s.name == "qemu_plugin_install";
    if (s.name == kQemuPluginAbiSymbol) abi = s;
  }
  if (!install) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " is not a QEMU plugin (no qemu_plugin_install): ", rebuild));
  }
  QemuPluginAbi value{};
  const std::vector<ElfSection> sections = elf->Sections();
  if (abi && abi->size == sizeof(value) && abi->section < sections.size()) {
    const ElfSection& section = sections[abi->section];
    std::span<const uint8_t> data = elf->SectionData(section);
    if (abi->value >= section.addr && abi->value - section.addr + sizeof(value) <= data.size()) {
      std::memcpy(&value, data.data() + (abi->value - section.addr), sizeof(value));
    }
  }
  if (std::memcmp(value.tag, kQemuPluginAbiTag, sizeof(value.tag)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " is a QEMU plugin but not ptkit's (no ", kQemuPluginAbiSymbol, "): ", rebuild));
  }
  if (value.region_version != kQemuRegionVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " is from another ptkit build (its ring version ", value.region_version,
                     ", this ptrecord's ", kQemuRegionVersion, "): ", rebuild));
  }
  return absl::OkStatus();
}

int GuestWaitStatus(int host_status, const std::string& version) {
  // qemu-user 7.2 (linux-user/signal.c) keeps the host's first real-time signals for itself
  // and maps guest signal 32 + k to host 34 + k (guest 63 and 64 have none: qemu ignores
  // them); when the guest dies of one, qemu kills itself with the host's number.
  if (!version.starts_with("7.") || !WIFSIGNALED(host_status) || WTERMSIG(host_status) < 34) {
    return host_status;
  }
  return (host_status & ~0x7f) | (WTERMSIG(host_status) - 2);
}

absl::StatusOr<QemuSetup> FindQemu(const std::string& plugin, const std::string& self_exe) {
  QemuSetup setup;
  setup.qemu = record::FindOnPath("qemu-x86_64");
  if (setup.qemu.empty()) {
    return absl::FailedPreconditionError(
        "--emulate=qemu needs qemu-x86_64, which is not installed (Debian: apt-get install "
        "qemu-user; qemu-user-static cannot load plugins), or use --emulate=step");
  }
  setup.plugin = plugin;
  std::string installed;  // where `cmake --install` puts it, looked in second
  if (setup.plugin.empty()) {
    const std::filesystem::path bin = std::filesystem::path(self_exe).parent_path();
    setup.plugin = (bin / kQemuPluginName).string();
    installed = (bin / PTKIT_QEMU_PLUGIN_INSTALLED / kQemuPluginName).lexically_normal().string();
    if (access(setup.plugin.c_str(), F_OK) != 0 && access(installed.c_str(), F_OK) == 0) {
      setup.plugin = installed;
    }
  }
  if (access(setup.plugin.c_str(), R_OK) != 0) {
    const int error = errno;
    if (!plugin.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the QEMU plugin ", plugin, " is not there (", ErrnoText(error),
                       "): give --qemu-plugin the ", kQemuPluginName, " built with this ptrecord"));
    }
    // Both places looked in (sweep 40b L18 named only the first).
    return absl::FailedPreconditionError(
        absl::StrCat("the QEMU plugin is neither next to ptrecord (", setup.plugin, ": ",
                     ErrnoText(error), ") nor where it is installed (", installed,
                     "): build the ptkit_qemu target, or give its path with --qemu-plugin PATH"));
  }
  setup.plugin = std::filesystem::absolute(setup.plugin).string();
  PTKIT_RETURN_IF_ERROR(CheckQemuPlugin(setup.plugin, !plugin.empty()));
  setup.version = QemuVersion(setup.qemu);
  return setup;
}

namespace {

// RecordQemu, with `ended` set once the command has exited (its errors after that are not the
// command's end).
absl::StatusOr<EmulateResult> RecordQemuUntilEnd(const EmulateOptions& options, bool& ended) {
  if (options.bts) {
    return Usage(absl::InvalidArgumentError(
        "--emulate=qemu does not write BTS (intel_bts): use --emulate=step for it"));
  }
  PTKIT_ASSIGN_OR_RETURN(std::vector<record::AddressFilter> filters,
                         ParseEmulatedFilters(options.filter));
  PTKIT_RETURN_IF_ERROR(CheckEmulatedModes(options, options.qemu_aux_pages));
  if (options.pt.mtc || options.pt.cyc) {
    // The plugin writes TSC packets only (it has no cycle count to time MTC or CYC by). A term
    // the emulated PMU does not take: a usage error, as the other terms' (sweep 40b L1).
    return Usage(absl::InvalidArgumentError(
        "--emulate=qemu writes no MTC or CYC packets (intel_pt terms mtc, cyc): use "
        "--emulate=step for them"));
  }
  PTKIT_ASSIGN_OR_RETURN(QemuSetup setup, FindQemu(options.qemu_plugin, options.self_exe));
  // As execvp finds it: a name with a '/' is itself (execve says what is wrong with it).
  const std::string& name = options.argv.at(0);
  std::string program = record::FindOnPath(name);
  if (program.empty() && name.find('/') != std::string::npos) program = name;
  if (program.empty()) return record::ExecFailure(name, ENOENT);
  // What the kernel would load (PlanFile): qemu-x86_64 loads only ELF programs (given a #!
  // script it exits 1 without a word), so a script runs as the kernel runs it, its
  // interpreter with the script's path in its argv. A file the kernel refuses as no program
  // (ENOEXEC) execvp runs with /bin/sh, as a shell script (glibc's maybe_script_execute).
  Exec exec;
  exec.argv = options.argv;
  ExecPlan plan = PlanFile(program, &exec);
  if (plan == ExecPlan::kFails && exec.error == ENOEXEC) {
    exec.argv.insert(exec.argv.begin() + 1, program);
    exec.argv[0] = "/bin/sh";
    plan = PlanFile("/bin/sh", &exec);
  }
  if (plan == ExecPlan::kFails) return record::ExecFailure(name, exec.error);
  if (plan == ExecPlan::kNotFollowed) {
    absl::Status s = absl::FailedPreconditionError(absl::StrCat(
        program,
        ": not an x86-64 ELF program nor a #! script of one, so qemu-x86_64 cannot run it "
        "(an i386 program, a format binfmt_misc runs, or a file it cannot read); record an "
        "i386 program with --emulate=step, or any of them without --emulate where the CPU has "
        "Intel PT"));
    s.SetPayload(record::kExitCodePayload, absl::Cord("126"));
    return s;
  }
  // Constructed before any thread starts (the writer's): SIGINT/SIGTERM/SIGHUP/SIGCHLD open
  // only inside the drain loop's ppoll.
  record::SignalWatcher signals;

  PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ContainerWriter> writer, CreateEmulatedWriter(options));
  bool ran = false;
  absl::Cleanup discard_unless_ran = [&] {
    if (ran) return;
    writer->Discard();
    std::error_code ec;
    if (!options.ground_truth.empty()) std::filesystem::remove(options.ground_truth, ec);
  };

  // The shared region: a memfd that qemu inherits (no CLOEXEC); the plugin maps and closes it.
  const uint64_t size = QemuRegionSize(kSlots, kSlotDataPages, options.qemu_aux_pages);
  ScopedFd memfd(memfd_create("ptkit-qemu-ring", 0));
  if (!memfd.valid()) return ErrnoStatus(errno, "memfd_create for the QEMU ring");
  if (ftruncate(memfd.get(), static_cast<off_t>(size)) != 0) {
    return ErrnoStatus(errno, "size the QEMU ring (", size, " bytes)");
  }
  ScopedMmap map(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0), size);
  if (!map.valid()) return ErrnoStatus(errno, "mmap the QEMU ring");
  auto* base = static_cast<uint8_t*>(map.get());
  InitQemuRegion(base, kSlots, kSlotDataPages, options.qemu_aux_pages);
  // Held by this thread, which drains, until the run ends: the plugin's sign that ptrecord is
  // there (QemuRegionHeader::reader_alive).
  PTKIT_RETURN_IF_ERROR(HoldReaderAlive(*RegionHeader(base)));
  absl::Cleanup release_reader = [base] { ReleaseReaderAlive(*RegionHeader(base)); };
  RegionHeader(base)->max_instructions = options.max_steps;
  const bool snapshots = options.snapshot_size.has_value();
  const bool sampling = options.aux_sample_size != 0;
  // (CheckEmulatedModes kept a sample record within 64 KiB.)
  RegionHeader(base)->overwrite = snapshots || sampling ? 1 : 0;
  RegionHeader(base)->aux_sample_size = options.aux_sample_size;
  RegionHeader(base)->sample_period = sampling ? options.sample_period : 0;
  RegionHeader(base)->trigger_limit = options.trigger_count;
  // The kernel's COMM: the basename of the file it was asked to run (the script, not its
  // interpreter).
  const std::string comm = program.substr(program.rfind('/') + 1);
  // 15 bytes at most, as the kernel keeps; the rest of the field is the new ring's zeros.
  comm.copy(RegionHeader(base)->workload_comm, sizeof(RegionHeader(base)->workload_comm) - 1);

  ScopedFd truth;
  if (!options.ground_truth.empty()) {
    truth.reset(open(options.ground_truth.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644));
    if (!truth.valid()) return ErrnoStatus(errno, "create ", options.ground_truth);
  }

  // ring=: where the plugin opens the memfd again for an exec'd program's qemu when the guest
  // closed its descriptor (kept open here until the run ends).
  std::string plugin_arg = absl::StrCat(setup.plugin, ",fd=", memfd.get(), ",ring=/proc/", getpid(),
                                        "/fd/", memfd.get());
  // sock=: where ring= does not reach (a pid namespace with its own /proc), the memfd is handed
  // over on an abstract unix socket (ServeRingSocket, after each drain pass). Without one (no
  // unix sockets here), such a program runs untraced and is said, as before.
  const std::string ring_socket = RingSocketName();
  const ScopedFd ring_listener(ListenRingSocket(ring_socket));
  if (ring_listener.valid()) absl::StrAppend(&plugin_arg, ",sock=", ring_socket);
  if (truth.valid()) absl::StrAppend(&plugin_arg, ",truth=", truth.get());
  // A guest process in another pid namespace asks for its pids in this one (QemuPidQuestion).
  if (struct stat ns{}; stat("/proc/self/ns/pid", &ns) == 0) {
    absl::StrAppend(&plugin_arg, ",pidns=", ns.st_ino);
  }
  // Long TNT (up to 47 branches a packet, SDM "Long TNT Packet"): a packet per 47 conditional
  // branches instead of 6 makes the plugin's fast path take 98% of them (bench/
  // qemu_emulate_bench.sh).
  absl::StrAppend(&plugin_arg, ",noretcomp=", options.pt.ret_compression ? 0 : 1,
                  ",psb_period=", options.pt.psb_period, ",tsc=", options.pt.tsc ? 1 : 0,
                  ",max_tnt=", kQemuMaxTntBits);
  // --filter: the regions as file ranges; the plugin finds them in the guest's mappings. (QEMU
  // splits the options at commas: the filter syntax has none in a file name either.)
  for (const record::AddressFilter& f : filters) {
    absl::StrAppend(&plugin_arg, ",filter=0x", absl::Hex(f.offset), "/0x", absl::Hex(f.size), "@",
                    f.file);
  }
  // --trigger: FUNC as a file offset; the plugin finds it in the guest's mappings (the file's
  // name has no comma: ParseTrigger found it through the filter syntax's rules).
  if (options.trigger) {
    absl::StrAppend(&plugin_arg, ",trigger=0x", absl::Hex(options.trigger->offset), "@",
                    options.trigger->file);
  }
  if (options.snapshot_on_crash) absl::StrAppend(&plugin_arg, ",crash=1");
  // "max", qemu-x86_64's default, named so the metadata can say what the program saw.
  // -plugin comes last among qemu's options: the plugin hands on the ones before it to the
  // qemu of a program the workload exec's.
  // -0: the program's argv[0] is the one it was given (qemu's would be the file it loads).
  std::vector<std::string> argv = {setup.qemu, "-cpu",       kQemuCpu, "-plugin",   plugin_arg,
                                   "-0",       exec.argv[0], "--",     exec.program};
  argv.insert(argv.end(), exec.argv.begin() + 1, exec.argv.end());

  // The metadata: the per-thread sideband layout the plugin writes, the identity TSC clock.
  perf_event_attr tracking = record::BuildTrackingAttr({.clockid = CLOCK_MONOTONIC});
  tracking.sample_type = kQemuSampleType;
  RecordingMetadata meta = record::BuildRecordingMetadata(
      EmulatedMetadataInput(options, tracking, kSlotDataPages, options.qemu_aux_pages));
  meta.emulated = "qemu";
  if (sampling) meta.mode = "aux-sample";
  if (snapshots) meta.mode = "snapshot";
  meta.clock = "CLOCK_MONOTONIC ns of the host (emulated: TSC packets and sideband use it)";
  meta.emulation = EmulationMetadata{
      .backend = "qemu",
      .streams = "per-thread",
      .format = "pt",
      .ret_compression = options.pt.ret_compression,
      .psb_period = options.pt.psb_period,
      .tsc = options.pt.tsc,
      .mtc = false,
      .cyc = false,
      .filter = record::KernelFilterString(filters),
      .note =
          "software Intel PT of the guest's flow under QEMU's TCG (qemu-user), not "
          "hardware: no vDSO, QEMU's CPUID and load addresses; long TNT packets (47 bits)"};
  meta.emulation->extra["qemu_version"] = setup.version;
  meta.emulation->extra["qemu_cpu"] = kQemuCpu;
  meta.emulation->extra["plugin"] = setup.plugin;
  PTKIT_RETURN_IF_ERROR(writer->AppendMetadata(meta.ToRecord()));

  const auto started = std::chrono::steady_clock::now();
  // qemu is only the recorder's means: it goes with ptrecord (a SIGUSR1 or SIGKILL to
  // ptrecord left the command running untraced: sweep 29c F5).
  PTKIT_ASSIGN_OR_RETURN(record::Workload workload,
                         record::Workload::Start(argv, /*die_with_parent=*/true));
  if (absl::Status s = workload.Go(); !s.ok()) {
    writer->Abandon().IgnoreError();
    return s;
  }
  truth.reset();  // qemu has it (the memfd stays open: the plugin's ring=)

  // One source per slot, all made now: a slot nobody claimed is an empty ring.
  std::vector<std::unique_ptr<QemuSlotSource>> sources;
  std::vector<record::TraceSource*> raw;
  for (uint32_t s = 0; s < kSlots; ++s) {
    sources.push_back(std::make_unique<QemuSlotSource>(SlotRing(base, s), SlotControl(base, s)));
    raw.push_back(sources.back().get());
  }
  record::CodeCapture code(options.archive);
  record::DrainOptions dopt;
  if (sampling) dopt.sample_type = kQemuAuxSampleType;
  dopt.on_record = [&code](const perf::RecordView& r, const perf::SampleIdLayout& l) {
    code.OnRecord(r, l);
  };
  record::Drainer drainer(writer.get(), dopt);
  QemuRegionHeader* const h = RegionHeader(base);
  // Snapshot mode: every thread running when SIGUSR2 came flushes its trace into its ring at
  // its next block check (or has it there already, in a system call); then each ring's newest
  // bytes are copied while the plugin does not write it. At the end (`all`), every thread's.
  uint64_t late_snapshots = 0;
  auto snapshot_round = [&](bool all) -> absl::Status {
    const uint32_t request = h->snapshot_request.fetch_add(1) + 1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (uint32_t s = 0; s < std::min(kSlots, h->slots_claimed.load()); ++s) {
      QemuSlotControl& c = *SlotControl(base, s);
      const uint32_t state = c.state.load(std::memory_order_acquire);
      if (state == kSlotFree || (!all && state != kSlotActive)) continue;
      while (!all && c.state.load() == kSlotActive && c.snapshot_ack.load() != request &&
             c.in_syscall.load() == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ++late_snapshots;  // taken with what the thread moved last
          break;
        }
        usleep(50);
      }
      if (!LockSlotForReading(c, 1000000000)) ++late_snapshots;
      absl::StatusOr<uint64_t> n = drainer.Snapshot(
          *sources[s],
          *options.snapshot_size != 0 ? *options.snapshot_size : sources[s]->ring().aux.size());
      UnlockSlotForReading(c);
      if (!n.ok()) return n.status();
    }
    return absl::OkStatus();
  };
  // --trigger: a thread that reached FUNC waits until its ring is copied (QemuSlotControl::
  // trigger_request); done after every pass (at least every kDrainIntervalMs).
  uint64_t trigger_snapshots = 0;
  auto trigger_snapshots_round = [&]() -> absl::Status {
    for (uint32_t s = 0; s < std::min(kSlots, h->slots_claimed.load()); ++s) {
      QemuSlotControl& c = *SlotControl(base, s);
      const uint32_t request = c.trigger_request.load(std::memory_order_acquire);
      if (request == c.trigger_ack.load(std::memory_order_relaxed)) continue;
      if (!LockSlotForReading(c, 1000000000)) ++late_snapshots;
      absl::StatusOr<uint64_t> n = drainer.Snapshot(
          *sources[s],
          *options.snapshot_size != 0 ? *options.snapshot_size : sources[s]->ring().aux.size());
      UnlockSlotForReading(c);
      c.trigger_ack.store(request, std::memory_order_release);
      if (!n.ok()) return n.status();
      ++trigger_snapshots;
    }
    return absl::OkStatus();
  };
  uint64_t snapshots_seen = signals.snapshot_count();
  bool said_usr2 = false;
  absl::Status snapshot_status;
  record::LoopOptions lo;
  lo.poll_timeout_ms = kDrainIntervalMs;
  lo.should_stop = [&] {
    if (options.trigger && snapshot_status.ok()) snapshot_status = trigger_snapshots_round();
    if (!snapshot_status.ok()) return true;
    if (signals.snapshot_count() == snapshots_seen) return false;
    snapshots_seen = signals.snapshot_count();
    if (snapshots) {
      snapshot_status = snapshot_round(/*all=*/false);
      return !snapshot_status.ok();
    }
    if (!said_usr2 && options.notice) {
      said_usr2 = true;
      options.notice(
          "SIGUSR2 ignored: not recording with --snapshot (the whole run is recorded; SIGINT or "
          "SIGTERM stop it and keep what was traced)");
    }
    return false;
  };
  std::optional<int> status;
  // The processes of the run still tracing after the command exited (a daemon's grandchild, a
  // fork child still working): their slots are open and their processes run. ptrecord waits for
  // them, as --emulate=step does (their trace was cut, and ended as killed, before).
  std::error_code exe_error;
  const std::string qemu_exe = std::filesystem::canonical(setup.qemu, exe_error).string();
  // A process forked but not yet run (its slot unclaimed) counts too (QemuRegionHeader::
  // forked_pids): its parent may have exited first.
  auto tracing = [&] {
    std::vector<uint32_t> pids;
    auto add = [&](uint32_t pid) {
      if (pid != 0 && std::find(pids.begin(), pids.end(), pid) == pids.end() && ProcessRuns(pid)) {
        pids.push_back(pid);
      }
    };
    for (uint32_t s = 0; s < std::min(kSlots, h->slots_claimed.load()); ++s) {
      const QemuSlotControl* c = SlotControl(base, s);
      // Still qemu too: a pid is used again by another program. And by ptrecord's pid (not a
      // namespace's that ptrecord could not translate: QemuPidQuestion), which in a pid
      // namespace names another process here, init or a kernel thread (sweep 37c H3: waited
      // for for ever after the namespace's processes were killed).
      if (c->state.load() == kSlotActive && c->namespace_pids.load() == 0 &&
          RunsQemu(c->pid, qemu_exe)) {
        add(c->pid);
      }
    }
    for (uint32_t i = 0; i < std::min(kQemuForkedPids, h->forks.load()); ++i) {
      const uint32_t pid = h->forked_pids[i].load();
      // Claimed and ended (its slot done): not waited for again.
      bool ended = false;
      for (uint32_t s = 0; s < std::min(kSlots, h->slots_claimed.load()) && !ended; ++s) {
        const QemuSlotControl* c = SlotControl(base, s);
        ended = c->pid == pid && c->state.load() == kSlotDone;
      }
      // And still qemu (not a pid used again since by another program).
      if (!ended && RunsQemu(pid, qemu_exe)) add(pid);
    }
    return pids;
  };
  bool said_waiting = false;
  lo.child_exited = [&] {
    if (!status) status = workload.TryReap();
    if (!status) return false;
    const std::vector<uint32_t> left = tracing();
    if (left.empty()) return true;
    if (!said_waiting && options.notice) {
      said_waiting = true;
      options.notice(WaitingNotice(left));
    }
    return false;
  };
  // The status line, about once a second, erased before the summary.
  record::StatusLine status_line(stderr, options.status_line, record::SteadyClockMs);
  // The plugin's questions about pids (QemuPidQuestion), answered after every pass from this
  // /proc: none where its pids are not those of ptrecord's namespace (every question then finds
  // nothing, and ptrecord warns).
  const std::string pid_proc = ProcHasOwnPids() ? "/proc" : "";
  auto answer_pid_questions = [&] {
    AnswerPidQuestions(base, std::min(kSlots, h->slots_claimed.load()), pid_proc);
  };
  // The recording replaces the output file (or stays there) once the command's code ran: the
  // first guest block claims a slot. Before, qemu itself may fail (a truncated ELF, no memory
  // for its code buffer), and the recording is discarded as for a command that could not run
  // (sweep 38b F3c: published when qemu started, a stub replaced the file --overwrite-existing
  // was to keep, or stayed at a new path and blocked the next run).
  absl::Status publish_status;
  auto publish_once_ran = [&] {
    if (ran || h->slots_claimed.load() == 0) return;
    ran = true;
    publish_status = writer->Publish();
  };
  lo.after_pass = [&] {
    h->reader_passes.fetch_add(1, std::memory_order_relaxed);  // alive (WaitForReader)
    if (ring_listener.valid()) ServeRingSocket(ring_listener.get(), memfd.get());
    publish_once_ran();
    answer_pid_questions();
    status_line.Update(drainer.Totals(), writer->stats().stored_bytes);
  };
  absl::StatusOr<record::LoopResult> loop = RunDrainLoop(raw, drainer, signals, lo);
  status_line.Clear();
  publish_once_ran();
  if (loop.ok() && !publish_status.ok()) loop = publish_status;
  if (loop.ok() && !snapshot_status.ok()) loop = snapshot_status;
  if (!loop.ok()) {
    writer->Abandon().IgnoreError();
    return loop.status();
  }
  EmulateResult result;
  if (!status || !tracing().empty()) {
    // Stopped by a signal: the plugin ends every stream at the next block or system call
    // return and exits; ptrecord drains meanwhile. A process that runs neither within a
    // second (blocked in a system call) gets SIGTERM, which ends that call; then SIGKILL.
    result.stop_signal = signals.last_stop_signal();
    RegionHeader(base)->stop_signal.store(static_cast<uint32_t>(result.stop_signal));
    auto done = [&] {
      if (!status) status = workload.TryReap();
      return status.has_value() && tracing().empty();
    };
    for (int step = 0; step < 3 && !done(); ++step) {
      if (step > 0) {
        const int signal = step == 1 ? SIGTERM : SIGKILL;
        if (!status) kill(workload.pid(), signal);
        for (uint32_t pid : tracing()) kill(static_cast<pid_t>(pid), signal);
      }
      for (int i = 0; i < 200 && !done(); ++i) {
        for (record::TraceSource* s : raw) drainer.DrainOnce(*s).IgnoreError();  // again below
        answer_pid_questions();
        usleep(5000);
      }
    }
    if (!status) status = workload.Wait();
  }
  ended = true;
  *status = GuestWaitStatus(*status, setup.version);
  // A thread that died with its process in a system call (qemu-user runs no plugin code at a
  // fatal signal) left the trace it staged there (QemuSlotWriter::StageTrace) with no
  // PERF_RECORD_AUX: written now in the plugin's place, once its slot's data ring is drained.
  if (RegionHeader(base)->overwrite == 0) {
    for (uint32_t s = 0; s < std::min(kSlots, h->slots_claimed.load()); ++s) {
      const QemuSlotControl* c = SlotControl(base, s);
      if (c->state.load() != kSlotActive) continue;
      QemuSlotWriter late(SlotRing(base, s), c->pid, c->tid, s);
      late.Resume(c->aux_recorded.load());
      if (late.staged() == 0) continue;
      if (absl::Status d = drainer.DrainOnce(*raw[s]).status(); !d.ok()) {
        writer->Abandon().IgnoreError();
        return d;
      }
      if (!late.RecordStaged(MonotonicNs())) {
        writer->Abandon().IgnoreError();
        return absl::InternalError(absl::StrCat("no room in slot ", s, "'s drained data ring"));
      }
    }
  }
  // What the plugin wrote after the loop's last pass.
  for (record::TraceSource* s : raw) {
    if (absl::StatusOr<uint64_t> n = drainer.DrainOnce(*s); !n.ok()) {
      writer->Abandon().IgnoreError();
      return n.status();
    }
  }
  if (h->has_error.load() != 0) {
    writer->Abandon().IgnoreError();
    return absl::InternalError(absl::StrCat("the QEMU plugin failed: ", h->error));
  }
  if (h->truth_failed.load() != 0) {
    // (Bounded: the plugin's process may have died within writing it; review 39 L6.)
    const std::string why(h->truth_error, strnlen(h->truth_error, sizeof(h->truth_error)));
    result.warnings.push_back(absl::StrCat(
        "the ground truth ", options.ground_truth, " is cut where it could not be written (",
        why.empty() ? "a write failed" : why, "); the trace is whole"));
  }
  // A trigger snapshot asked for as the process ended.
  if (absl::Status s = options.trigger ? trigger_snapshots_round() : absl::OkStatus(); !s.ok()) {
    writer->Abandon().IgnoreError();
    return s;
  }
  // --snapshot-on-crash: qemu died of the guest's fatal signal (it kills itself with it) and
  // the plugin marked the thread that took it in the workload's process (the first; a fork
  // child's crash is not the workload's). The end round below is then the crash snapshot.
  if (options.snapshot_on_crash && WIFSIGNALED(*status) && result.stop_signal == 0) {
    for (uint32_t s = 0; s < std::min(kSlots, h->slots_claimed.load()); ++s) {
      const QemuSlotControl* c = SlotControl(base, s);
      if (c->crashed.load(std::memory_order_acquire) == 0 ||
          c->pid != static_cast<uint32_t>(workload.pid())) {
        continue;
      }
      result.crash = record::CrashInfo{
          .pid = c->pid, .tid = c->tid, .signal = WTERMSIG(*status), .ip = c->crash_ip};
      break;
    }
  }
  // A fatal signal in user code without --snapshot-on-crash: the plugin ended the stream where
  // the block the thread took it in began.
  for (uint32_t s = 0; s < std::min(kSlots, h->slots_claimed.load()); ++s) {
    const QemuSlotControl* c = SlotControl(base, s);
    if (c->crashed.load(std::memory_order_acquire) != 2) continue;
    const bool workload_signal =
        c->pid == static_cast<uint32_t>(workload.pid()) && WIFSIGNALED(*status);
    result.warnings.push_back(absl::StrCat(
        "thread ", c->tid, " died of ",
        workload_signal ? record::SignalName(WTERMSIG(*status)) : "a fatal signal",
        absl::StrFormat(" in the block at %#x: its trace ends where that block began", c->crash_ip),
        " (the block's instructions before the fault are not in it; --snapshot-on-crash ends it "
        "at the faulting instruction)"));
  }
  if (snapshots) {
    if (absl::Status s = snapshot_round(/*all=*/true); !s.ok()) {
      writer->Abandon().IgnoreError();
      return s;
    }
  }
  if (late_snapshots > 0) {
    result.warnings.push_back(absl::StrCat(
        late_snapshots,
        " snapshots of a thread that did not flush its trace within a second (not at a block "
        "boundary, nor in a system call): they end where it last moved its trace, up to 20 ms "
        "earlier"));
  }
  result.steps.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (uint32_t s = 0; s < std::min(kSlots, h->slots_claimed.load()); ++s) {
    const QemuSlotControl* c = SlotControl(base, s);
    result.steps.instructions += c->instructions.load();
    if (c->state.load() != kSlotFree) ++result.threads;
  }
  if (h->slots_claimed.load() == 0) {
    // qemu never ran a guest block: it could not start the program (its message is on
    // stderr) or refused the plugin.
    writer->Abandon().IgnoreError();
    return absl::FailedPreconditionError(absl::StrCat("qemu-x86_64 ran no guest code (exit status ",
                                                      record::Workload::ExitCode(*status),
                                                      "): see its message above"));
  }
  // A thread that never ended died with its process of a signal no code of qemu's sees
  // (SIGKILL; the plugin's hook of qemu's kill() ends the others' streams) or went on natively
  // after an execve (`execs`, below). One in a system call had put all its trace into the ring
  // first; one in user code had not. The loss is recorded where the stream ends, so that every
  // decode shows it.
  uint32_t cut = 0;
  for (uint32_t s = 0; s < std::min(kSlots, h->slots_claimed.load()); ++s) {
    const QemuSlotControl* c = SlotControl(base, s);
    if (c->state.load() != kSlotActive || c->in_syscall.load() != 0) continue;
    ++cut;
    const record::RingView ring = SlotRing(base, s);
    const StreamId sid{StreamKind::kThread, c->tid};
    if (absl::Status st = writer->AppendLoss(LossRecord{
            .stream = sid,
            .kind = LossKind::kKilled,
            .count = 1,
            .time = MonotonicNs(),
            .aux_offset = drainer.StreamOffset(sid, ring.page, record::LoadAuxHead(ring.page))});
        !st.ok()) {
      writer->Abandon().IgnoreError();
      return st;
    }
  }
  if (cut > 0) {
    result.warnings.push_back(absl::StrCat(
        cut, cut == 1 ? " stream ends without its" : " streams end without their",
        " last bytes (those of up to its last 20 ms; the instructions they held may be many more, "
        "in a loop that writes no packet): the process died of a signal in user code that no "
        "code of qemu's sees (SIGKILL)"));
  }
  if (uint32_t n = h->threads_refused.load(); n > 0) {
    result.warnings.push_back(
        absl::StrCat(n, " guest threads were not traced: the ring has ", kSlots, " streams"));
  }
  if (uint32_t n = h->threads_cut.load(); n > 0) {
    result.warnings.push_back(absl::StrCat(
        n,
        " threads did not stop within 0.5 s when their process exited or exec'd: their "
        "last bytes of trace (up to one chunk) are missing"));
  }
  if (uint32_t n = h->execs.load(); n > 0) {
    std::string first;
    if (h->unfollowed_named.load(std::memory_order_acquire) == 2) {
      first = absl::StrCat(
          " of ", std::string(h->unfollowed_program,
                              strnlen(h->unfollowed_program, sizeof(h->unfollowed_program))));
    }
    result.warnings.push_back(absl::StrCat(
        "the trace ends at execve", first, " (", n, n == 1 ? " time" : " times",
        n > 1 && !first.empty() ? ", the first named" : "",
        "): the new program is not one qemu-x86_64 runs (not an x86-64 ELF program, not "
        "readable, or a file without a name: a memfd, a deleted file), or the program closed "
        "the plugin's descriptor of the ring and it could not be opened again; it ran natively, "
        "untraced"));
  }
  if (uint32_t n = h->pids_unknown.load(); n > 0) {
    result.warnings.push_back(absl::StrCat(
        n, n == 1 ? " thread" : " threads",
        " of a pid namespace other than ptrecord's keep that namespace's pids in the recording "
        "(ptrecord could not find them in its /proc, or that /proc is not of its own pid "
        "namespace): they may equal other processes' pids, whose streams and sideband theirs "
        "then mix with; --emulate=step records the pids of ptrecord's namespace"));
  }
  if (uint32_t n = h->clones_refused.load(); n > 0) {
    result.warnings.push_back(absl::StrCat(
        n, n == 1 ? " clone call" : " clone calls",
        " with CLONE_VM but not CLONE_THREAD failed with EINVAL under qemu-x86_64, which creates "
        "no such process (a native run would have): the program went on without it; "
        "--emulate=step records it as it runs natively"));
  }
  if (uint32_t n = h->unresolved_signals.load(); n > 0) {
    result.warnings.push_back(absl::StrCat(
        n,
        " signals came right after a branch whose target only their frame knows, and the "
        "handler never returned by rt_sigreturn (siglongjmp), returned elsewhere than the "
        "branch's target (a handler that changes where the thread resumes: Go's asynchronous "
        "preemption), or too many waited at once: the trace lacks that conditional branch (one "
        "instruction), or has that RET or indirect branch going to the handler; or a fault's "
        "handler ran after a block that ends in a direct call: the trace has the block up to "
        "that call, whether the fault came before or not"));
  }
  PTKIT_ASSIGN_OR_RETURN(std::vector<std::string> code_warnings, code.Write(*writer));
  for (std::string& w : code_warnings) result.warnings.push_back(std::move(w));
  result.steps.threads = result.threads;
  result.totals = drainer.Totals();
  result.exit_code = record::Workload::ExitCode(*status);
  result.steps.exit_status = result.exit_code;
  if (WIFSIGNALED(*status)) result.steps.exit_signal = WTERMSIG(*status);
  result.steps.step_limit_hit = h->limit_hit.load() != 0;
  // The program died of SIGILL at an instruction QEMU does not implement: a setup error (exit
  // 1) once the container, valid up to there, is closed.
  std::string illegal;
  if (result.steps.exit_signal == SIGILL && h->illegal_ip.load() != 0) {
    std::string hex;
    for (uint8_t byte : h->illegal_bytes) absl::StrAppend(&hex, absl::Hex(byte, absl::kZeroPad2));
    illegal = absl::StrCat("the program died of SIGILL at 0x", absl::Hex(h->illegal_ip.load()),
                           ", an instruction QEMU's TCG does not implement (bytes ",
                           hex.substr(0, 30), h->illegal_bytes[0] == 0x62 ? ": EVEX, AVX-512" : "",
                           "); its trace up to there is in ", options.output,
                           "; --emulate=step runs it natively");
  } else if (result.steps.exit_signal == SIGILL) {
    result.warnings.push_back(
        "SIGILL under QEMU: the program used an instruction QEMU's TCG does not implement "
        "(e.g. AVX-512), or raised it; --emulate=step runs it natively");
  }
  if (result.stop_signal != 0) {
    result.exit_code = 128 + result.stop_signal;
    result.steps.stop_requested = true;
  }
  EndMetadata end{.instructions = result.steps.instructions,
                  .threads = result.threads,
                  .workload_exit_status = result.steps.exit_status};
  if (result.steps.exit_signal != 0) end.workload_signal = SignalName(result.steps.exit_signal);
  if (result.stop_signal != 0) {
    end.stopped_by = SignalName(result.stop_signal);
  } else if (result.steps.step_limit_hit) {
    end.stopped_by = "--max-steps";
  }
  if (options.trigger) {
    result.trigger_hits = h->trigger_hits.load();
    result.trigger_snapshots = trigger_snapshots;
    end.extra["trigger"] = TriggerEndJson(options, result.trigger_hits, trigger_snapshots);
  }
  if (result.crash) end.extra["crash"] = record::CrashJson(*result.crash);
  // What ptrecord warned of stays with the recording: every decode says it too.
  if (!result.warnings.empty()) end.extra["warnings"] = result.warnings;
  meta.end = std::move(end);
  PTKIT_RETURN_IF_ERROR(writer->AppendMetadata(meta.ToRecord()));
  PTKIT_RETURN_IF_ERROR(writer->Close());
  // Published by Close where the loop ended before the first block claimed a slot (a stop
  // signal in qemu's first milliseconds): the ground truth stays with it (review 38 L1).
  ran = true;
  if (!illegal.empty()) return absl::FailedPreconditionError(illegal);
  return result;
}

}  // namespace

absl::StatusOr<EmulateResult> RecordQemu(const EmulateOptions& options) {
  bool ended = false;
  absl::StatusOr<EmulateResult> r = RecordQemuUntilEnd(options, ended);
  if (!r.ok() && ended) return record::AfterCommandEnded(r.status());
  return r;
}

}  // namespace ptkit::emulate
