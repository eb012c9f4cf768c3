// ptrecord: records Intel PT / BTS (or only sideband) of a command or running tasks into a
// trace.pt container. Flags are parsed here; everything else is record/session.h.
//
// Exit codes: the workload's status when recording succeeded (0 without a workload; 128 + N
// when signal N killed it); stopped by SIGINT/SIGTERM/SIGHUP while it ran: 128 + that signal;
// 2 usage errors; 1 runtime failures; 126 found but cannot execute; 127 program not found.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "completion/completion.h"
#include "ptkit/numbers.h"
#include "ptkit/scoped_fd.h"
#include "record/aux_sample.h"
#include "record/drain_loop.h"
#include "record/emulate/emulate.h"
#include "record/emulate/qemu_backend.h"
#include "record/session.h"
#include "record/status_line.h"
#include "record/trigger.h"
#include "record/workload.h"

namespace {

using ptkit::record::SessionOptions;

int ExitCodeFor(const absl::Status& s) {
  if (absl::optional<absl::Cord> p = s.GetPayload(ptkit::record::kExitCodePayload)) {
    const std::string v(*p);
    if (v == "2") return 2;
    if (v == "126") return 126;
    if (v == "127") return 127;
  }
  return 1;
}

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "ptrecord: %s\n", message.c_str());
  return code;
}

// A recording that failed: its error; one that failed writing its output (a full disk) also
// says what became of the command and of the file.
int FailRecording(const absl::Status& status, const SessionOptions& o) {
  std::string message(status.message());
  if (message.starts_with("write " + o.output + ": ")) {
    const char* command = o.command.empty() ? ""
                          : ptkit::record::CommandHadEnded(status)
                              ? " (the command had ended)"
                              : ", and the command with it (killed)";
    message += absl::StrCat("; the recording stopped there", command, ": ", o.output,
                            " keeps every record written before (ptdecode decodes them; ptdecode "
                            "info says where it was cut)");
  }
  return Fail(message, ExitCodeFor(status));
}

// The options --emulate refuses (usage errors): other targets, the kernel, the AUX area's
// modes, counters, PMU descriptions. Named in --help and man/ptrecord.1.
constexpr const char* kNotWithEmulate[] = {
    "--pid",          "--tid",           "--all-cpus", "--cpu",           "--per-thread",
    "--kernel",       "--aux-watermark", "--counters", "--sideband-only", "--sysfs-root",
    "--sample-event", "--control",       "--kcore",    "--callchain"};

// The default --sample-period of --emulate: instructions of a thread between AUX samples.
constexpr uint64_t kEmulatedSamplePeriod = 1000;

// "1 thread", "2 threads".
std::string Count(uint64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// The backend `--emulate` without a value means: qemu when qemu-x86_64 and the plugin are
// there, else step, which is thousands of times slower: said (but with --quiet), with what is
// missing (a CI job that built ptrecord without the plugin single-stepped without a word).
std::string DefaultBackend(const std::string& plugin, const std::string& self_exe, bool quiet) {
  absl::StatusOr<ptkit::emulate::QemuSetup> qemu = ptkit::emulate::FindQemu(plugin, self_exe);
  if (qemu.ok()) return "qemu";
  if (!quiet) {
    std::fprintf(stderr,
                 "ptrecord: --emulate single-steps the command under ptrace (tens of thousands "
                 "of instructions/s), not under QEMU: %s\n",
                 std::string(qemu.status().message()).c_str());
  }
  return "step";
}

// --emulate: the workload runs under QEMU with ptkit's plugin (record/emulate/qemu_backend.h)
// or single-stepped under ptrace, and its Intel PT (or BTS) is made in software
// (record/emulate/emulate.h).
int RunEmulated(const CLI::App& app, const SessionOptions& o, bool bts,
                const std::string& ground_truth, uint64_t max_steps, bool quiet,
                std::string backend, const std::string& qemu_plugin) {
  for (const char* flag : kNotWithEmulate) {
    if (app.count(flag) > 0) {
      return Fail(std::string(flag) + " does not apply to --emulate (see ptrecord --help)", 2);
    }
  }
  if (o.command.empty()) return Fail("--emulate needs a command: ptrecord --emulate -- cmd", 2);
  absl::StatusOr<ptkit::emulate::EmulatedEvent> event =
      ptkit::emulate::ParseEmulatedEvent(bts ? "intel_bts//u" : o.trace_event);
  if (!event.ok()) return Fail(std::string(event.status().message()), 2);
  const std::string self_exe = std::filesystem::read_symlink("/proc/self/exe").string();
  // --qemu-plugin names the backend: a bad plugin is said once, as with --emulate=qemu (sweep
  // 40b M3: step ran, said the plugin was bad, and then refused --qemu-plugin: two lines).
  if (backend == "default") {
    backend =
        app.count("--qemu-plugin") > 0 ? "qemu" : DefaultBackend(qemu_plugin, self_exe, quiet);
  }
  if (backend != "qemu" && backend != "step") {
    return Fail("--emulate=" + backend + ": expected --emulate=qemu or --emulate=step", 2);
  }
  if (backend == "step" && app.count("--qemu-plugin") > 0) {
    return Fail("--qemu-plugin needs --emulate=qemu", 2);
  }
  ptkit::emulate::EmulateOptions e;
  e.backend = backend;
  e.qemu_plugin = qemu_plugin;
  e.self_exe = self_exe;
  e.argv = o.command;
  e.output = o.output;
  e.overwrite_existing = o.overwrite_existing;
  e.status_line = o.status_line;
  e.compress = o.compress;
  e.bts = event->bts;
  e.pt = event->pt;
  e.ground_truth = ground_truth;
  e.max_steps = max_steps;
  e.archive = o.archive;
  e.filter = o.filter;
  e.data_pages = o.data_pages;
  if (o.snapshot_size) e.snapshot_size = o.snapshot_size;
  if (!o.trigger.empty()) {
    absl::StatusOr<ptkit::record::TriggerSpec> t =
        ptkit::record::ParseTrigger(o.trigger, o.command.front());
    if (!t.ok()) return Fail(std::string(t.status().message()), 2);
    e.trigger = *t;
    e.trigger_count = o.trigger_count;
  }
  e.snapshot_on_crash = o.snapshot_on_crash;
  if (o.aux_sample_size) {
    e.aux_sample_size = *o.aux_sample_size;
    e.sample_period = o.sample_period != 0 ? o.sample_period : kEmulatedSamplePeriod;
  }
  if (app.count("--mmap-pages") > 0) e.aux_pages = e.qemu_aux_pages = o.aux_pages;
  e.command_line = o.command_line;
  if (!quiet) {
    e.notice = [](const std::string& text) {
      std::fprintf(stderr, "ptrecord: %s\n", text.c_str());
    };
  }
  absl::StatusOr<ptkit::emulate::EmulateResult> r = ptkit::emulate::RecordEmulated(e);
  if (!r.ok()) return FailRecording(r.status(), o);
  for (const std::string& w : r->warnings)
    std::fprintf(stderr, "ptrecord: warning: %s\n", w.c_str());
  std::string ending;
  if (e.aux_sample_size != 0) {
    ending = "; " + Count(r->totals.samples, "AUX sample") + " of " +
             std::to_string(e.aux_sample_size) + " bytes";
  }
  if (e.snapshot_size) ending += "; " + Count(r->totals.snapshots, "snapshot");
  if (r->stop_signal != 0) {
    ending += "; stopped by " + ptkit::emulate::SignalName(r->stop_signal) +
              " (the workload was killed; the trace up to there is complete)";
  } else if (r->steps.step_limit_hit) {
    ending += "; stopped at --max-steps";
  }
  if (e.trigger) {
    ending += "; " + Count(r->trigger_hits, "hit") + " of " + e.trigger->text + ", " +
              Count(r->trigger_snapshots, "snapshot") + " at them";
    if (e.trigger_count != 0)
      ending += " (--trigger-count " + std::to_string(e.trigger_count) + ")";
  }
  if (r->crash) {
    ending += "; crash snapshot: " + ptkit::emulate::SignalName(r->crash->signal) + " in thread " +
              std::to_string(r->crash->tid);
  }
  if (!quiet) {
    // Every trace byte stored: the full trace's, the snapshots' and the AUX samples'.
    const uint64_t trace_bytes =
        r->totals.aux_bytes + r->totals.snapshot_bytes + r->totals.sample_aux_bytes;
    std::fprintf(
        stderr,
        "ptrecord: wrote %s (emulated%s): %s, %s in %.2f s "
        "(%.0f %s/s), %llu trace bytes, %llu sideband records, %llu lost records"
        "%s\n",
        o.output.c_str(), backend == "qemu" ? " under qemu" : "",
        Count(r->threads, "thread").c_str(), Count(r->steps.instructions, "instruction").c_str(),
        r->steps.seconds,
        r->steps.seconds > 0
            ? (backend == "qemu" ? r->steps.instructions : r->steps.steps) / r->steps.seconds
            : 0.0,
        backend == "qemu" ? "instructions" : "steps", static_cast<unsigned long long>(trace_bytes),
        static_cast<unsigned long long>(r->totals.sideband_records),
        static_cast<unsigned long long>(r->totals.lost_records), ending.c_str());
  }
  // A workload that crashed is never a quiet success, --quiet or not.
  if (r->steps.exit_signal != 0 && r->stop_signal == 0 && !r->steps.step_limit_hit) {
    std::fprintf(stderr, "ptrecord: workload killed by %s (exit status %d)\n",
                 ptkit::emulate::SignalName(r->steps.exit_signal).c_str(), r->exit_code);
  }
  return r->exit_code;
}

// SIGPIPE (-o a pipe whose reader went away) and SIGXFSZ (ulimit -f) ended ptrecord without a
// word (sweep 31c F4, F5: exit 141 or 153, the command left running): with a handler that does
// nothing, the write fails instead (EPIPE, EFBIG) and ptrecord says so, as for a full disk. A
// handler, unlike SIG_IGN, is the default again after exec, so the command starts with what
// ptrecord was given; one that was ignored stays ignored (the write fails the same).
void FailWritesInsteadOfDying() {
  for (int sig : {SIGPIPE, SIGXFSZ}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape): a bug; terminate says it
  ptkit::HoldClosedStdioOpen();
  // (First: a test takes SIGPIPE's handler as the sign that SIGUSR2 has one.)
  ptkit::record::CountSnapshotRequestsFromNow();
  FailWritesInsteadOfDying();
  CLI::App app{
      "Record Intel PT (or BTS) of a command or running tasks, with the sideband needed to "
      "decode it, into a trace.pt container.\n"
      "  ptrecord [options] -- command [args...]\n"
      "  ptrecord [options] -p PID | -t TID | -a",
      "ptrecord"};
  app.set_version_flag("--version", "ptrecord " PTKIT_VERSION);
  SessionOptions o;
  std::string mmap_pages, snapshot, watermark, aux_sample;
  int64_t sample_period = 0, trigger_count = 0;
  std::string pid, tid;
  bool bts = false, no_compress = false, quiet = false;
  std::string emulate, qemu_plugin;
  std::vector<std::string> filters;  // --filter, each of them (joined into o.filter)
  std::string ground_truth;
  int64_t max_steps = 0;
  app.add_option("-o,--output", o.output, "Output container (default trace.pt)");
  app.add_flag("--overwrite-existing", o.overwrite_existing,
               "Replace the output file if it exists, once the command runs (a recording that "
               "fails before leaves it)");
  app.add_option("--event", o.trace_event,
                 "Trace event as perf writes it (default intel_pt//), e.g. "
                 "intel_pt/cyc,psb_period=2/u");
  app.add_flag("--bts", bts, "Trace with intel_bts// instead of intel_pt//");
  app.add_flag("--sideband-only", o.sideband_only,
               "No trace event: record only sideband (mmaps, comms, tasks, switches) and "
               "counters; works without Intel PT");
  app.add_option("-e,--counters", o.counters,
                 "Comma-separated counters to count alongside (any libpfm4 name: "
                 "task-clock,page-faults,cycles,...)");
  app.add_option("-p,--pid", pid, "Record every thread of a running process");
  app.add_option("-t,--tid", tid, "Record one running thread");
  app.add_flag("-a,--all-cpus", o.all_cpus, "Record every task on the CPUs (see -C)");
  app.add_option("-C,--cpu", o.cpu_list, "Only these CPUs, e.g. 0-3,5");
  app.add_flag("--per-thread", o.per_thread, "One ring per thread instead of one per CPU");
  app.add_option("-m,--mmap-pages", mmap_pages,
                 "DATA_PAGES[,AUX_PAGES], powers of two (default 64,1024)");
  app.add_flag("-u,--user", o.user_only, "Trace user space only");
  app.add_flag("-k,--kernel", o.kernel_only, "Trace the kernel only");
  app.add_option("--filter", filters,
                 "Address filter in perf's syntax, e.g. 'filter main @ /bin/ls' (symbols are "
                 "resolved to file offsets; several: comma-separated, or the option repeated; "
                 "with --emulate: 'filter' regions; step runs a single-threaded process at full "
                 "speed outside the regions' bytes, qemu writes no packets outside them)");
  app.add_option("--snapshot", snapshot,
                 "Snapshot mode: AUX overwrite, one snapshot per SIGUSR2 and at the end; "
                 "optional SIZE per snapshot (K/M/G), default the whole AUX area (0 or above it: "
                 "a usage error; the AUX area at most 128M)")
      ->expected(0, 1);
  app.add_option("--aux-sample", aux_sample,
                 "AUX sampling: a sampling event (--sample-event) in the trace event's group "
                 "whose samples carry the newest SIZE bytes of the trace (default 4K, at most "
                 "60K, a multiple of 8); the trace itself is not stored. intel_pt gets "
                 "psb_period=0 unless --event sets it. With --emulate: a sample every "
                 "--sample-period instructions of each thread")
      ->expected(0, 1);
  app.add_option("--sample-event", o.sample_event,
                 "With --aux-sample: the sampling event, a libpfm4 name (default cycles)");
  app.add_flag("-g,--callchain", o.sample_callchain,
               "With --aux-sample: each sample also carries the kernel's call chain "
               "(PERF_SAMPLE_CALLCHAIN, frame pointers, as perf record -g); ptdecode samples "
               "shows it");
  app.add_option("-c,--sample-period", sample_period,
                 "With --aux-sample: events between samples (default 1000000; with --emulate: "
                 "instructions, default 1000)");
  app.add_option("--control", o.control,
                 "fifo:CTL[,ACK]: read perf's control commands (enable, disable, snapshot, "
                 "stop, ping) from the FIFO CTL, answer each with 'ack' on ACK");
  app.add_option("--trigger", o.trigger,
                 "uprobe:FUNC[@FILE]: a snapshot each time the workload (any thread or child) "
                 "reaches FUNC of FILE (default: the workload's program), through a uprobe perf "
                 "event (--emulate=qemu: the plugin instruments FUNC, the thread waits until its "
                 "snapshot is copied); implies --snapshot")
      ->type_name("uprobe:FUNC[@FILE]");
  app.add_option("--trigger-count", trigger_count,
                 "With --trigger: only the first N hits (of any thread or child) take a "
                 "snapshot; later ones are counted (default: every hit)")
      ->type_name("N");
  app.add_flag("--snapshot-on-crash", o.snapshot_on_crash,
               "When the workload dies of a signal (SIGSEGV, SIGABRT, ...), a snapshot before it "
               "is gone, labelled with the signal and thread (ptdecode info; the default "
               "report shows that thread's last branches first); implies --snapshot. The "
               "kernel path ptrace-seizes the workload to see the signal; --emulate=qemu notes "
               "each instruction's address to know where the thread stopped (slower)");
  app.add_flag("--kcore", o.kcore,
               "Also copy the kernel's text (from /proc/kcore, root), /proc/kallsyms, "
               "/proc/modules and the kernel build-id into the container, so ptdecode decodes "
               "and names kernel code (as perf record --kcore)");
  app.add_option("--aux-watermark", watermark,
                 "AUX bytes that wake ptrecord (K/M/G; default a quarter of the AUX area)");
  app.add_flag("--no-compress", no_compress, "Store records without zstd");
  app.add_flag("--archive", o.archive,
               "Also store every mapped executable file whole, and its separate debug file "
               "where there is one, so decoding needs nothing from this machine");
  app.add_option("--sysfs-root", o.sysfs_root,
                 "Where PMUs are described (default /sys/bus/event_source/devices)");
  app.add_flag("--emulate{default}", emulate,
               "No Intel PT needed: write the Intel PT (or --bts) the command would produce, "
               "in software; user space, per-thread streams, CLOCK_MONOTONIC time. "
               "--emulate=qemu (the default when qemu-x86_64 is installed): runs it under "
               "QEMU's TCG with ptkit's plugin, hundreds of millions of instructions/s, the "
               "guest's sideband written by the plugin. --emulate=step: single-steps it under "
               "ptrace with the kernel's real sideband, the native flow exactly, ~15k-50k "
               "instructions/s (progress on a terminal). SIGINT/SIGTERM stop it and keep the "
               "trace (exit 128 + signal). Refuses " +
                   absl::StrJoin(kNotWithEmulate, ", "));
  app.add_option(
      "--qemu-plugin", qemu_plugin,
      "With --emulate=qemu: the plugin (default: libptkit_qemu.so next to ptrecord, else in "
      "../libexec/ptkit/ from it, where cmake --install puts it)");
  app.add_option("--ground-truth", ground_truth,
                 "With --emulate: write every retired instruction as 'TID 0xADDRESS' lines");
  app.add_option(
      "--max-steps", max_steps,
      "With --emulate: stop (kill every process of the command) once N instructions "
      "have retired over all its threads and processes (N >= 1; step: one more per other "
      "thread stepping at the time; qemu: at most N, at a block boundary)");
  app.add_flag("-q,--quiet", quiet,
               "No summary line, no status line, and with --emulate no notices (waiting for a "
               "daemon, SIGUSR2 ignored); warnings and errors are still printed");
  ptkit::completion::AddCompletionFlag(app);
  app.prefix_command();  // everything after the first non-option is the command

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {  // --completion
    return 0;
  } catch (const CLI::RuntimeError& e) {  // --completion could not write
    return Fail(e.what(), e.get_exit_code());
  } catch (const CLI::ParseError& e) {
    return Fail(std::string(e.what()) + " (see ptrecord --help)", 2);
  }

  o.filter = absl::StrJoin(filters, ", ");  // repeated --filter: one filter of them all
  // prefix_command() leaves the first unknown argument and everything after it; an option
  // there is a typo, not a command (a command starting with '-' needs "--").
  o.command = app.remaining();
  if (!o.command.empty()) {
    if (o.command.front() == "--") {
      o.command.erase(o.command.begin());
    } else if (o.command.front().starts_with("-")) {
      return Fail("unknown option " + o.command.front() + " (see ptrecord --help)", 2);
    }
  }
  // "-o -- cmd" took "--" as the file name: a forgotten value, not a file called "--".
  for (const auto& [flag, value] : {std::pair<const char*, const std::string&>{"-o", o.output},
                                    {"--ground-truth", ground_truth}}) {
    if (app.count(flag) > 0 && (value.empty() || value.front() == '-')) {
      return Fail(absl::StrCat(flag, " needs a file name, not '", value,
                               "' (a file whose name starts with '-': ./", value, ")"),
                  2);
    }
  }
  // (The error_code form: a path stat cannot check, a symbolic link loop or a name too long,
  // threw: sweep 31c F9, SIGABRT. Creating the file says what is wrong with it.)
  std::error_code not_checked;
  if (std::filesystem::is_directory(o.output, not_checked)) {
    return Fail(
        "-o " + o.output + " is a directory: name a file (e.g. -o " + o.output + "/trace.pt)", 2);
  }
  // The command writes to the standard output and error ptrecord has: a container there (-o
  // /dev/stdout, or `-o t.pt ... > t.pt` with --overwrite-existing) would hold its output too
  // (not a device: /dev/null takes both).
  if (!o.command.empty()) {
    struct stat out {};
    if (::stat(o.output.c_str(), &out) == 0 && !S_ISCHR(out.st_mode)) {
      for (const auto& [fd, name] : {std::pair{1, "output"}, std::pair{2, "error"}}) {
        struct stat stream {};
        if (::fstat(fd, &stream) == 0 && stream.st_dev == out.st_dev &&
            stream.st_ino == out.st_ino) {
          return Fail(absl::StrCat("-o ", o.output, " is the command's standard ", name,
                                   " too: what the command writes there would go into the "
                                   "container; write it to a file of its own (-o FILE)"),
                      2);
        }
      }
    }
  }
  if (app.count("--max-steps") > 0 && max_steps < 1) {
    return Fail("--max-steps " + std::to_string(max_steps) +
                    ": expected a number of steps >= 1 (without --max-steps there is no limit)",
                2);
  }
  o.command_line.assign(argv, argv + argc);
  // -p / -t: an id of 1 or more; a negative or 0 one is a mistake, not "no -p".
  for (const auto& [flag, text, what, out] :
       {std::tuple<const char*, const std::string&, const char*, std::optional<pid_t>&>{
            "--pid", pid, "-p: expected a process id", o.pid},
        {"--tid", tid, "-t: expected a thread id", o.tid}}) {
    if (app.count(flag) == 0) continue;
    uint32_t id = 0;
    if (!ptkit::ParseUnsigned(text, &id) || id == 0 ||
        id > static_cast<uint32_t>(std::numeric_limits<pid_t>::max())) {
      return Fail(std::string(what) + " (a number of 1 or more), not '" + text + "'", 2);
    }
    out = static_cast<pid_t>(id);
  }
  if (bts) {
    if (app.count("--event") > 0) return Fail("--bts and --event exclude each other", 2);
    o.trace_event = "intel_bts//";
  }
  o.compress = !no_compress;
  if (!mmap_pages.empty()) {
    absl::StatusOr<std::pair<uint64_t, uint64_t>> m = ptkit::record::ParseMmapPages(mmap_pages);
    if (!m.ok()) return Fail(std::string(m.status().message()), 2);
    o.data_pages = m->first;
    if (m->second != 0) o.aux_pages = m->second;
  }
  if (app.count("--snapshot") > 0) {
    o.snapshot_size = 0;
    if (!snapshot.empty()) {
      absl::StatusOr<uint64_t> s = ptkit::record::ParseSize(snapshot);
      if (!s.ok()) {
        // (`ptrecord --snapshot ./app` took the command for the size: sweep 37a L4.)
        return Fail("--snapshot: " + std::string(s.status().message()) +
                        "; a size is written --snapshot=SIZE, and the command goes after --",
                    2);
      }
      // (Sweep 30a F9: 0 took the whole area, a size beyond it was cut to it, unsaid.)
      if (*s == 0) {
        return Fail("--snapshot 0: give a size above 0, or none for the whole AUX area", 2);
      }
      // (Against the kernel's AUX area; the emulated rings: CheckEmulatedModes.)
      const uint64_t area = o.aux_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
      if (emulate.empty() && *s > area) {
        return Fail(
            absl::StrCat("--snapshot ", snapshot, ": larger than the AUX area (", area >> 10,
                         " KiB: -m DATA_PAGES,AUX_PAGES sets it); give at most ", area >> 10,
                         "K, or a larger area"),
            2);
      }
      o.snapshot_size = *s;
    }
  }
  if ((!o.trigger.empty() || o.snapshot_on_crash) && !o.snapshot_size) {
    o.snapshot_size = 0;  // snapshot mode, the whole AUX area per snapshot
  }
  if (app.count("--trigger-count") > 0) {
    if (o.trigger.empty()) return Fail("--trigger-count needs --trigger", 2);
    if (trigger_count < 1) {
      return Fail("--trigger-count " + std::to_string(trigger_count) +
                      ": expected 1 or more (without it every hit takes a snapshot)",
                  2);
    }
    o.trigger_count = static_cast<uint64_t>(trigger_count);
  }
  if (!o.trigger.empty() && o.command.empty()) {
    return Fail("--trigger needs a workload: ptrecord --trigger uprobe:FUNC -- cmd", 2);
  }
  if (o.snapshot_on_crash && o.command.empty()) {
    return Fail("--snapshot-on-crash needs a workload: ptrecord --snapshot-on-crash -- cmd", 2);
  }
  if (app.count("--aux-sample") > 0) {
    o.aux_sample_size = ptkit::record::kDefaultAuxSampleSize;
    if (!aux_sample.empty()) {
      absl::StatusOr<uint64_t> s = ptkit::record::ParseSize(aux_sample);
      if (!s.ok()) {
        return Fail("--aux-sample: " + std::string(s.status().message()) +
                        "; a size is written --aux-sample=SIZE, and the command goes after --",
                    2);
      }
      if (absl::Status bad = ptkit::record::CheckAuxSampleSize(*s, 0); !bad.ok()) {
        return Fail(std::string(bad.message()), 2);
      }
      o.aux_sample_size = *s;
    }
  }
  if ((app.count("--sample-period") > 0 || app.count("--sample-event") > 0 || o.sample_callchain) &&
      !o.aux_sample_size) {
    return Fail("--sample-period, --sample-event and --callchain need --aux-sample", 2);
  }
  if (app.count("--sample-period") > 0) {
    if (sample_period < 1) {
      return Fail("--sample-period " + std::to_string(sample_period) + ": expected 1 or more", 2);
    }
    o.sample_period = static_cast<uint64_t>(sample_period);
  }
  if (!watermark.empty()) {
    absl::StatusOr<uint64_t> w = ptkit::record::ParseSize(watermark);
    if (!w.ok() || *w == 0 || *w > (uint64_t{1} << 31)) {
      return Fail("--aux-watermark " + watermark + ": expected 1 byte to 2G", 2);
    }
    o.aux_watermark = *w;
  }

  o.status_line = !quiet && ptkit::record::StatusLineFits(!o.command.empty());
  if (!emulate.empty()) {
    return RunEmulated(app, o, bts, ground_truth, static_cast<uint64_t>(max_steps), quiet, emulate,
                       qemu_plugin);
  }
  if (!qemu_plugin.empty()) return Fail("--qemu-plugin needs --emulate=qemu", 2);
  if (!ground_truth.empty() || max_steps != 0) {
    return Fail("--ground-truth and --max-steps need --emulate", 2);
  }

  absl::StatusOr<ptkit::record::SessionResult> r = ptkit::record::RunSession(o);
  if (!r.ok()) return FailRecording(r.status(), o);
  for (const std::string& w : r->warnings)
    std::fprintf(stderr, "ptrecord: warning: %s\n", w.c_str());
  for (const std::string& n : r->notes) std::fprintf(stderr, "ptrecord: %s\n", n.c_str());
  if (!quiet) {
    const ptkit::record::StreamStats& t = r->totals;
    std::fprintf(
        stderr,
        "ptrecord: wrote %s (%llu bytes): %llu sideband records, %llu AUX bytes, "
        "%llu snapshots, %llu AUX samples, %llu truncations, %llu lost records%s\n",
        o.output.c_str(), static_cast<unsigned long long>(r->file_bytes),
        static_cast<unsigned long long>(t.sideband_records),
        static_cast<unsigned long long>(t.aux_bytes), static_cast<unsigned long long>(t.snapshots),
        static_cast<unsigned long long>(t.samples), static_cast<unsigned long long>(t.truncated),
        static_cast<unsigned long long>(t.lost_records),
        r->stop_signal != 0 ? ("; stopped by " + ptkit::emulate::SignalName(r->stop_signal) +
                               " (the command was sent SIGTERM)")
                                  .c_str()
                            : "");
  }
  // A workload that crashed is never a quiet success, --quiet or not (as with --emulate).
  if (r->workload_signal != 0) {
    std::fprintf(stderr, "ptrecord: workload killed by %s (exit status %d)\n",
                 ptkit::emulate::SignalName(r->workload_signal).c_str(),
                 r->workload_exit_code.value_or(0));
  }
  return r->workload_exit_code.value_or(0);
}
