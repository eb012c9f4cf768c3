#include "record/session.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "ptkit/container_format.h"
#include "ptkit/container_writer.h"
#include "ptkit/numbers.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"
#include "record/address_filter.h"
#include "record/attach_records.h"
#include "record/aux_sample.h"
#include "record/code_capture.h"
#include "record/control.h"
#include "record/counters.h"
#include "record/crash.h"
#include "record/drain_loop.h"
#include "record/event_spec.h"
#include "record/kcore.h"
#include "record/metadata.h"
#include "record/perf_event.h"
#include "record/proc_maps.h"
#include "record/ring_buffer.h"
#include "record/status_line.h"
#include "record/text_util.h"
#include "record/trace_source.h"
#include "record/trigger.h"
#include "record/workload.h"

namespace ptkit::record {

absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text) {
  std::vector<int> cpus;
  const std::string_view t = Strip(text);
  if (t.empty()) return absl::InvalidArgumentError("empty CPU list");
  for (std::string_view part : Split(t, ',')) {
    part = Strip(part);
    const size_t dash = part.find('-');
    unsigned lo = 0, hi = 0;
    const bool ok = dash == std::string_view::npos ? ParseUnsigned(part, &lo) && (hi = lo, true)
                                                   : ParseUnsigned(part.substr(0, dash), &lo) &&
                                                         ParseUnsigned(part.substr(dash + 1), &hi);
    if (!ok || lo > hi || hi > 4095) {
      return absl::InvalidArgumentError(absl::StrCat("bad CPU list \"", std::string(t), "\": \"",
                                                     std::string(part),
                                                     "\" (expected e.g. 0-3,5)"));
    }
    for (unsigned c = lo; c <= hi; ++c) cpus.push_back(static_cast<int>(c));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> ParseMmapPages(std::string_view text) {
  const std::vector<std::string_view> parts = Split(Strip(text), ',');
  std::pair<uint64_t, uint64_t> out{0, 0};
  if (parts.size() > 2 || !ParseUnsigned(Strip(parts[0]), &out.first) || !IsPowerOfTwo(out.first) ||
      (parts.size() == 2 &&
       (!ParseUnsigned(Strip(parts[1]), &out.second) || !IsPowerOfTwo(out.second)))) {
    return absl::InvalidArgumentError(
        absl::StrCat("-m ", std::string(text),
                     ": expected DATA_PAGES[,AUX_PAGES], each a power of "
                     "two (e.g. -m 64,1024)"));
  }
  if (out.first > kMaxMmapPages || out.second > kMaxMmapPages) {
    return absl::InvalidArgumentError(absl::StrCat("-m ", std::string(text), ": at most ",
                                                   kMaxMmapPages,
                                                   " pages (16 GiB of 4 KiB pages) each"));
  }
  return out;
}

absl::StatusOr<uint64_t> ParseSize(std::string_view text) {
  std::string_view t = Strip(text);
  uint64_t mult = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'k':
      case 'K':
        mult = 1 << 10;
        break;
      case 'm':
      case 'M':
        mult = 1 << 20;
        break;
      case 'g':
      case 'G':
        mult = 1 << 30;
        break;
      default:
        break;
    }
    if (mult != 1) t.remove_suffix(1);
  }
  uint64_t v = 0;
  if (!ParseUnsigned(t, &v) || v > (UINT64_MAX >> 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad size \"", std::string(text), "\" (expected bytes with an optional K, M or G suffix)"));
  }
  return v * mult;
}

absl::StatusOr<PerfEvent> OpenTrackingEvent(perf_event_attr& attr, pid_t pid, int cpu,
                                            const std::string& what) {
  absl::StatusOr<PerfEvent> opened = PerfEvent::Open(attr, pid, cpu, what);
  if (opened.status().code() == absl::StatusCode::kInvalidArgument && attr.build_id) {
    attr.build_id = 0;
    opened = PerfEvent::Open(attr, pid, cpu, what);
  }
  return opened;
}

absl::StatusOr<std::unique_ptr<KernelTraceSource>> OpenTrackingSource(
    perf_event_attr& attr, pid_t pid, int cpu, StreamId stream, uint64_t data_pages, uint64_t rings,
    const MlockLimits& limits, const std::string& what) {
  PTKIT_ASSIGN_OR_RETURN(PerfEvent event, OpenTrackingEvent(attr, pid, cpu, what));
  PTKIT_ASSIGN_OR_RETURN(RingBuffer ring,
                         RingBuffer::Map(event, data_pages, 0, false, rings, limits));
  return std::make_unique<KernelTraceSource>(std::move(event), std::vector<PerfEvent>{},
                                             std::move(ring), stream, cpu,
                                             perf::SampleIdLayout{attr.sample_type, true});
}

namespace {

// Whether task `tid` no longer exists (an attached process's thread that exited).
bool Gone(pid_t tid) { return kill(tid, 0) != 0 && errno == ESRCH; }

// The largest AUX area in snapshot mode: a power of two that, with its header, fits in one
// container record (kMaxPayloadSize).
constexpr uint64_t kMaxSnapshotBytes = kMaxPayloadSize / 2;

// Marks a bad option value: ptrecord exits 2 for these.
absl::Status Usage(absl::Status s) {
  if (!s.ok()) s.SetPayload(kExitCodePayload, absl::Cord("2"));
  return s;
}
template <typename T>
absl::StatusOr<T> Usage(absl::StatusOr<T> v) {
  if (!v.ok()) return Usage(v.status());
  return v;
}

std::string NoPmuHint(std::string_view pmu) {
  if (pmu == "intel_pt" || pmu == "intel_bts") {
    return "this CPU or VM does not expose Intel PT/BTS; record on a machine that has it "
           "(Intel Broadwell or newer, bare metal or a VM with PT passed through), or use "
           "--emulate (software Intel PT, exact: under QEMU, or single-stepped) or "
           "--sideband-only (sideband and counters without a trace)";
  }
  return "check the event's PMU name";
}

}  // namespace

namespace {

// RunSession, with `ended` set once the command has exited (its errors after that are not the
// command's end).
absl::StatusOr<SessionResult> RunSessionUntilEnd(const SessionOptions& o, bool& ended) {
  // --- Validate everything before touching the system --------------------------------------
  const int targets = (!o.command.empty()) + o.pid.has_value() + o.tid.has_value() + o.all_cpus;
  if (targets == 0) {
    return Usage(absl::InvalidArgumentError(
        "nothing to record: give a command after --, or -p PID, -t TID or -a"));
  }
  if (targets > 1) {
    return Usage(absl::InvalidArgumentError("choose one target: -- command, -p PID, -t TID or -a"));
  }
  // perf's filter syntax with symbols, resolved to the file offsets the kernel takes.
  std::string kernel_filter;
  if (!o.filter.empty() && !o.sideband_only) {
    PTKIT_ASSIGN_OR_RETURN(std::vector<AddressFilter> filters,
                           Usage(ParseAddressFilters(o.filter)));
    kernel_filter = KernelFilterString(filters);
  }
  std::optional<ControlSpec> control_spec;
  if (!o.control.empty()) {
    PTKIT_ASSIGN_OR_RETURN(control_spec, Usage(ParseControlSpec(o.control)));
  }
  std::optional<TriggerSpec> trigger_spec;
  if (o.trigger_count != 0 && o.trigger.empty()) {
    return Usage(absl::InvalidArgumentError("--trigger-count needs --trigger"));
  }
  if (!o.trigger.empty()) {
    if (!o.snapshot_size) {
      return Usage(absl::InvalidArgumentError("--trigger takes snapshots: it needs --snapshot"));
    }
    if (o.command.empty() && !o.pid) {
      return Usage(absl::InvalidArgumentError(
          "--trigger needs a workload (-- command) or a process (-p PID) whose hits count"));
    }
    PTKIT_ASSIGN_OR_RETURN(trigger_spec,
                           Usage(ParseTrigger(o.trigger, o.command.empty() ? "" : o.command[0])));
  }
  if (o.snapshot_on_crash && (o.command.empty() || !o.snapshot_size)) {
    return Usage(absl::InvalidArgumentError(
        "--snapshot-on-crash needs a workload (-- command) and snapshot mode"));
  }
  // --kcore reads the kernel's files before anything starts (a failure leaves no file).
  std::optional<KernelCapture> kernel;
  if (o.kcore) {
    PTKIT_ASSIGN_OR_RETURN(kernel, CaptureKernel());
  }
  if (o.per_thread && (o.all_cpus || !o.cpu_list.empty())) {
    return Usage(absl::InvalidArgumentError("--per-thread cannot be combined with -a or -C"));
  }
  if (o.user_only && o.kernel_only) {
    return Usage(
        absl::InvalidArgumentError("-u and -k exclude each other (omit both to trace both)"));
  }
  if (o.aux_sample_size && (o.sideband_only || o.snapshot_size)) {
    return Usage(absl::InvalidArgumentError(
        "--aux-sample needs a trace event and full-trace mode (not --sideband-only or "
        "--snapshot)"));
  }
  if (o.snapshot_size && o.sideband_only) {
    return Usage(
        absl::InvalidArgumentError("--snapshot needs a trace event (not --sideband-only)"));
  }
  if (!IsPowerOfTwo(o.data_pages) || (!o.sideband_only && !IsPowerOfTwo(o.aux_pages))) {
    return Usage(absl::InvalidArgumentError(absl::StrCat("-m ", o.data_pages, ",", o.aux_pages,
                                                         ": page counts must be powers of two")));
  }
  // A snapshot is one container record, so the AUX area must fit in one.
  const uint64_t page_size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (o.snapshot_size && !o.sideband_only && o.aux_pages * page_size > kMaxSnapshotBytes) {
    return Usage(absl::InvalidArgumentError(absl::StrCat(
        "--snapshot: an AUX area of ", o.aux_pages, " pages (", (o.aux_pages * page_size) >> 20,
        " MiB) is more than one snapshot can hold (", kMaxSnapshotBytes >> 20, " MiB): use -m ",
        o.data_pages, ",", kMaxSnapshotBytes / page_size, " or less")));
  }

  std::optional<Pmu> pmu;
  ResolvedEvent event;
  std::vector<std::string> notes;
  if (!o.sideband_only) {
    PTKIT_ASSIGN_OR_RETURN(EventSpec spec, Usage(ParseEventString(o.trace_event)));
    if (o.aux_sample_size) {
      if (spec.pmu != "intel_pt") {
        return Usage(absl::InvalidArgumentError(
            absl::StrCat("--aux-sample needs intel_pt (", spec.pmu, " cannot take AUX samples)")));
      }
      PTKIT_RETURN_IF_ERROR(Usage(CheckAuxSampleSize(*o.aux_sample_size, o.aux_pages * page_size)));
      if (std::string note = AddAuxSampleTerms(spec); !note.empty()) {
        notes.push_back(std::move(note));
      }
    }
    if (o.user_only) spec.user = true, spec.kernel = false;
    if (o.kernel_only) spec.user = false, spec.kernel = true;
    PmuRegistry registry(o.sysfs_root);
    absl::StatusOr<Pmu> found = registry.Find(spec.pmu);
    if (found.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("no ", spec.pmu, " PMU here (", registry.root(), "/",
                                              spec.pmu, " does not exist): ", NoPmuHint(spec.pmu)));
    }
    if (!found.ok()) return found.status();
    pmu = *std::move(found);
    PTKIT_ASSIGN_OR_RETURN(event, Usage(ResolveEvent(*pmu, spec)));
  }
  std::optional<CounterSpec> sampler;  // --aux-sample's sampling event
  if (o.aux_sample_size) {
    PTKIT_ASSIGN_OR_RETURN(sampler,
                           Usage(EncodeCounter(o.sample_event, !o.kernel_only, !o.user_only)));
  }
  std::vector<CounterSpec> counter_specs;
  if (!o.counters.empty()) {
    PTKIT_ASSIGN_OR_RETURN(counter_specs,
                           Usage(EncodeCounters(o.counters, !o.kernel_only, !o.user_only)));
  }
  PTKIT_ASSIGN_OR_RETURN(std::string online_text, ReadSystemFile("/sys/devices/system/cpu/online"));
  PTKIT_ASSIGN_OR_RETURN(std::vector<int> online, ParseCpuList(online_text));
  std::vector<int> cpus = online;
  if (!o.cpu_list.empty()) {
    PTKIT_ASSIGN_OR_RETURN(cpus, Usage(ParseCpuList(o.cpu_list)));
    for (int c : cpus) {
      if (!std::binary_search(online.begin(), online.end(), c)) {
        return Usage(absl::InvalidArgumentError(absl::StrCat(
            "-C ", o.cpu_list, ": CPU ", c, " is not online (online: ", online_text, ")")));
      }
    }
  }

  std::optional<ControlChannel> control;
  if (control_spec) {
    PTKIT_ASSIGN_OR_RETURN(control, Usage(ControlChannel::Open(*control_spec)));
  }

  // --- Signals first: threads created from here on inherit the blocked mask ----------------
  SignalWatcher signals;

  WriterOptions wo;
  wo.compress = o.compress;
  wo.overwrite = o.overwrite_existing;
  absl::StatusOr<std::unique_ptr<ContainerWriter>> created = ContainerWriter::Create(o.output, wo);
  if (created.status().code() == absl::StatusCode::kAlreadyExists) {
    return Usage(absl::AlreadyExistsError(
        absl::StrCat(created.status().message(), " (-o FILE, or --overwrite-existing)")));
  }
  if (!created.ok()) return created.status();
  std::unique_ptr<ContainerWriter> writer = *std::move(created);
  // A setup failure before the trace starts leaves no file behind (the next run would be
  // refused by it); a failure later leaves the file without footer (the writer is abandoned).
  bool started = false;
  absl::Cleanup remove_unless_started = [&] {
    if (!started) writer->Discard();
  };

  std::optional<Workload> workload;
  std::unique_ptr<CrashWatcher> crash_watcher;  // after `workload`: ends before it
  std::vector<pid_t> pids;  // the tasks events are opened for; -1 = every task (-a)
  pid_t process = 0;        // -p, -t: the process of the thread id given
  if (!o.command.empty()) {
    PTKIT_ASSIGN_OR_RETURN(Workload w, Workload::Start(o.command));
    pids.push_back(w.pid());
    workload = std::move(w);
    // --snapshot-on-crash: the workload is watched for the signal that ends it, from now on.
    if (o.snapshot_on_crash) {
      PTKIT_ASSIGN_OR_RETURN(crash_watcher, CrashWatcher::Start(workload->pid()));
    }
  } else if (o.pid) {
    // -p of any thread id attaches to its whole process, until the process ends (as perf).
    PTKIT_ASSIGN_OR_RETURN(process, ThreadGroupOf(*o.pid));
    PTKIT_ASSIGN_OR_RETURN(pids, ListThreads(process));
  } else if (o.tid) {
    PTKIT_ASSIGN_OR_RETURN(process, ThreadGroupOf(*o.tid));
    pids.push_back(*o.tid);
  } else {
    pids.push_back(-1);
  }

  // --trigger: the uprobe on every traced CPU, its hits kept for the workload's processes.
  std::optional<UprobeTrigger> trigger;
  if (trigger_spec) {
    PTKIT_ASSIGN_OR_RETURN(trigger, UprobeTrigger::Open(*trigger_spec, cpus));
  }

  // --- Events and rings ------------------------------------------------------------------
  const bool with_workload = workload.has_value();
  const bool inherit = !o.per_thread;
  const uint64_t aux_pages = o.sideband_only ? 0 : o.aux_pages;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint32_t watermark =
      o.aux_watermark ? static_cast<uint32_t>(o.aux_watermark)
                      : static_cast<uint32_t>(std::min<uint64_t>(aux_pages * page / 4, 1u << 30));
  perf_event_attr aux_attr = BuildAuxAttr(
      event, {.enable_on_exec = with_workload, .inherit = inherit, .aux_watermark = watermark});
  perf_event_attr track_attr =
      BuildTrackingAttr({.enable_on_exec = with_workload,
                         .inherit = inherit,
                         .exclude_kernel = false,
                         .wakeup_bytes = static_cast<uint32_t>(o.data_pages * page / 2),
                         // MMAP2 records carry the mapped file's build-id (Linux 5.12+; else
                         // OpenTrackingEvent opens without), as perf record --buildid-mmap: the
                         // file that ran, though its path names another file here (a container's
                         // or another mount namespace's: sweep 37c H2, the host's file was
                         // identified, archived and decoded in its place, silently).
                         .build_id = true});
  const perf::SampleIdLayout layout{kSampleIdType, true};
  const perf_event_attr sample_attr =
      sampler ? BuildAuxSampleAttr(sampler->attr,
                                   o.sample_period ? o.sample_period : kDefaultSamplePeriod,
                                   o.aux_sample_size.value_or(0), inherit, o.sample_callchain)
              : perf_event_attr{};
  const std::string trace_name = o.sideband_only ? "tracking event" : DescribeEvent(*pmu, event);

  struct Slot {
    pid_t pid;
    int cpu;
  };
  std::vector<Slot> slots;  // one ring each
  if (o.per_thread) {
    for (pid_t p : pids) slots.push_back(Slot{p, -1});
  } else {
    for (int c : cpus) slots.push_back(Slot{pids[0], c});
  }
  const uint64_t nrings = slots.size();
  const MlockLimits limits = ReadMlockLimits();

  std::vector<std::unique_ptr<KernelTraceSource>> sources;
  for (const Slot& s : slots) {
    const std::string where =
        s.cpu >= 0 ? absl::StrCat("cpu ", s.cpu) : absl::StrCat("tid ", s.pid);
    const StreamId stream = s.cpu >= 0 ? StreamId{StreamKind::kCpu, uint64_t(s.cpu)}
                                       : StreamId{StreamKind::kThread, uint64_t(s.pid)};
    std::unique_ptr<KernelTraceSource> source;
    // --aux-sample: the sampling event joins the group of trace event `leader` (the kernel
    // takes AUX samples from the group leader's AUX area) and writes into this slot's ring.
    auto add_sampler = [&](const PerfEvent& leader, pid_t p, const std::string& what) {
      PTKIT_ASSIGN_OR_RETURN(
          PerfEvent e,
          PerfEvent::OpenInGroup(sample_attr, p, s.cpu, leader.fd(),
                                 absl::StrCat(sampler->name, " AUX sampling (", what, ")")));
      if (&leader != &source->aux_event()) PTKIT_RETURN_IF_ERROR(e.SetOutput(source->aux_event()));
      source->redirected().push_back(std::move(e));
      return absl::OkStatus();
    };
    // Other threads of -p on this CPU, and the tracking event, write into the same ring.
    auto redirect = [&](perf_event_attr& attr, pid_t p, const std::string& what) -> absl::Status {
      const bool trace = &attr == &aux_attr;
      PTKIT_ASSIGN_OR_RETURN(PerfEvent e, trace ? PerfEvent::Open(attr, p, s.cpu, what)
                                                : OpenTrackingEvent(attr, p, s.cpu, what));
      PTKIT_RETURN_IF_ERROR(e.SetOutput(source->aux_event()));
      if (trace && !kernel_filter.empty()) PTKIT_RETURN_IF_ERROR(e.SetFilter(kernel_filter));
      if (trace && sampler) PTKIT_RETURN_IF_ERROR(add_sampler(e, p, what));
      (trace ? source->peers() : source->redirected()).push_back(std::move(e));
      return absl::OkStatus();
    };
    if (o.sideband_only) {
      PTKIT_ASSIGN_OR_RETURN(
          source, OpenTrackingSource(track_attr, s.pid, s.cpu, stream, o.data_pages, nrings, limits,
                                     absl::StrCat(trace_name, " (", where, ")")));
    } else {
      PTKIT_ASSIGN_OR_RETURN(
          PerfEvent main,
          PerfEvent::Open(aux_attr, s.pid, s.cpu, absl::StrCat(trace_name, " (", where, ")")));
      if (!kernel_filter.empty()) PTKIT_RETURN_IF_ERROR(main.SetFilter(kernel_filter));
      // AUX sampling maps the AUX area read-only (overwrite), as perf does: only samples
      // read it.
      PTKIT_ASSIGN_OR_RETURN(RingBuffer ring, RingBuffer::Map(main, o.data_pages, aux_pages,
                                                              o.snapshot_size.has_value() ||
                                                                  o.aux_sample_size.has_value(),
                                                              nrings, limits));
      source = std::make_unique<KernelTraceSource>(std::move(main), std::vector<PerfEvent>{},
                                                   std::move(ring), stream, s.cpu, layout);
      if (sampler) {
        PTKIT_RETURN_IF_ERROR(
            add_sampler(source->aux_event(), s.pid, absl::StrCat(trace_name, " (", where, ")")));
      }
      PTKIT_RETURN_IF_ERROR(
          redirect(track_attr, s.pid, absl::StrCat("tracking event (", where, ")")));
    }
    if (!o.per_thread) {
      for (size_t i = 1; i < pids.size(); ++i) {
        const std::string w2 = absl::StrCat("tid ", pids[i], " cpu ", s.cpu);
        absl::Status opened = absl::OkStatus();
        if (!o.sideband_only) {
          opened = redirect(aux_attr, pids[i], absl::StrCat(trace_name, " (", w2, ")"));
        }
        if (opened.ok()) {
          opened = redirect(track_attr, pids[i], absl::StrCat("tracking event (", w2, ")"));
        }
        // A thread of the process that exited since it was listed: nothing of it to record
        // (as perf skips it; the recording failed: a review).
        if (!opened.ok() && !Gone(pids[i])) return opened;
      }
    }
    sources.push_back(std::move(source));
  }

  // Counters: one set for the task (inherited by its children), one per thread for -p (each
  // inherited by the threads it creates; summed at the end, as perf stat -p shows them), or
  // one per CPU for -a.
  std::vector<CounterSet> counter_sets;
  SessionResult result;
  if (!counter_specs.empty()) {
    std::vector<Slot> cslots;
    if (pids[0] == -1) {
      for (int c : cpus) cslots.push_back(Slot{-1, c});
    } else if (o.pid) {
      for (pid_t tid : pids) cslots.push_back(Slot{tid, -1});
    } else {
      cslots.push_back(Slot{pids[0], -1});
    }
    for (const Slot& s : cslots) {
      absl::StatusOr<CounterSet> opened =
          CounterSet::Open(counter_specs, s.pid, s.cpu, with_workload);
      if (!opened.ok() && o.pid && Gone(s.pid)) continue;  // a thread that exited since
      PTKIT_ASSIGN_OR_RETURN(CounterSet set, std::move(opened));
      if (counter_sets.empty()) {
        for (const std::string& w : set.warnings()) result.warnings.push_back(w);
      }
      counter_sets.push_back(std::move(set));
    }
  }

  // --- Metadata ------------------------------------------------------------------------------
  MetadataInput meta;
  meta.command_line = o.command_line;
  meta.workload = o.command;
  meta.cpu = ReadCpuId();
  meta.pmu = pmu;
  if (pmu) meta.event = DescribeEvent(*pmu, event);
  if (!o.sideband_only) meta.attrs.emplace_back("trace", aux_attr);
  meta.attrs.emplace_back("tracking", track_attr);
  if (sampler) meta.attrs.emplace_back("aux-sample", sample_attr);
  for (const CounterSpec& c : counter_specs) meta.attrs.emplace_back(c.name, c.attr);
  meta.time = ReadTimeConversion(sources.front()->ring().page);
  meta.page_size = page;
  meta.mode = o.sideband_only     ? "sideband-only"
              : o.snapshot_size   ? "snapshot"
              : o.aux_sample_size ? "aux-sample"
                                  : "full-trace";
  if (!o.per_thread) meta.cpus = cpus;
  meta.data_pages = o.data_pages;
  meta.aux_pages = aux_pages;
  PTKIT_RETURN_IF_ERROR(writer->AppendMetadata(
      BuildMetadata(meta).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));

  // --kcore: the kernel's text and symbol tables, stored after the metadata.
  if (kernel) {
    PTKIT_RETURN_IF_ERROR(WriteKernelCapture(*writer, *kernel));
    notes.push_back(absl::StrCat(
        "--kcore: ", kernel->text.size(), " bytes of kernel text at 0x",
        absl::Hex(kernel->text_address), ", ", kernel->kallsyms.size(),
        " bytes of /proc/kallsyms, ", kernel->modules.size(), " of /proc/modules, build-id ",
        kernel->build_id.empty() ? "none"
                                 : absl::BytesToHexString(absl::string_view(
                                       reinterpret_cast<const char*>(kernel->build_id.data()),
                                       kernel->build_id.size()))));
    for (const std::string& n : kernel->notes) notes.push_back("--kcore: " + n);
  }

  CodeCapture code(o.archive);
  // Attached (-p, -t, -a): what the processes had mapped before, read from /proc before the
  // events go on, as perf does (its synthesized records): reading every process's files for
  // -a once the events were on held the drain back while the AUX areas filled (300 ms for 92
  // processes: a review). A mapping made in between is in neither.
  if (!workload) {
    std::vector<uint8_t> before;
    auto add = [&](pid_t pid, std::span<const pid_t> tids) {
      absl::StatusOr<std::vector<uint8_t>> records = SynthesizeProcessRecords(pid, tids, layout);
      if (records.ok()) before.insert(before.end(), records->begin(), records->end());
      return records.status();
    };
    if (o.pid || o.tid) {
      // Gone already (it ends the recording at once).
      if (absl::Status added = add(process, pids); !added.ok()) {
        result.warnings.push_back(
            absl::StrCat("what process ", process,
                         " had mapped before the attach is not recorded: ", added.message()));
      }
    } else {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
        unsigned pid = 0;
        if (!ParseUnsigned(e.path().filename().string(), &pid)) continue;
        absl::StatusOr<std::vector<pid_t>> tids = ListThreads(static_cast<pid_t>(pid));
        if (tids.ok()) (void)add(static_cast<pid_t>(pid), *tids);  // gone meanwhile: nothing
      }
    }
    for (perf::RecordReader r(before);;) {
      absl::StatusOr<std::optional<perf::RecordView>> rec = r.Next();
      if (!rec.ok() || !*rec) break;
      code.OnRecord(**rec, layout);
    }
    if (!before.empty()) PTKIT_RETURN_IF_ERROR(writer->AppendSideband({-1, before}));
  }

  // --- Go ------------------------------------------------------------------------------------
  if (workload) {
    PTKIT_RETURN_IF_ERROR(workload->Go());  // (the file is removed on return)
  } else {
    for (auto& s : sources) {
      PTKIT_RETURN_IF_ERROR(s->Enable());  // the trace event and its peers
      for (PerfEvent& e : s->redirected()) PTKIT_RETURN_IF_ERROR(e.Enable());
    }
    for (CounterSet& c : counter_sets) PTKIT_RETURN_IF_ERROR(c.EnableAll());
  }
  started = true;
  PTKIT_RETURN_IF_ERROR(writer->Publish());

  DrainOptions dopt;
  if (sampler) dopt.sample_type = sample_attr.sample_type;
  dopt.on_record = [&code](const perf::RecordView& r, const perf::SampleIdLayout& l) {
    code.OnRecord(r, l);
  };
  Drainer drainer(writer.get(), dopt);
  ScopedFd pidfd_holder;
  LoopOptions lo;
  lo.snapshot_mode = o.snapshot_size.has_value();
  lo.snapshot_size = o.snapshot_size.value_or(0);
  if (control) lo.control = &*control;
  if (trigger) {
    const uint32_t root = static_cast<uint32_t>(workload ? workload->pid() : *o.pid);
    lo.trigger_fds = trigger->poll_fds();
    trigger->set_snapshot_limit(o.trigger_count);
    lo.triggered = SnapshotHitsOf(*trigger, root);
  }
  lo.notice = [&result](const std::string& text) { result.warnings.push_back(text); };
  if (workload) {
    lo.child_exited = [&] {
      if (crash_watcher) {
        // A thread held at its fatal signal ends the loop: its last snapshot round is the
        // crash snapshot, taken while the workload still exists. Until the workload exits,
        // only the watcher may wait for it.
        if (crash_watcher->crash()) return true;
        if (!crash_watcher->exited()) return false;
      }
      std::optional<int> st = workload->TryReap();
      if (st) {
        ended = true;
        result.workload_exit_code = Workload::ExitCode(*st);
        if (WIFSIGNALED(*st)) result.workload_signal = WTERMSIG(*st);
      }
      return st.has_value();
    };
  } else if (o.pid || o.tid) {
    // A pidfd becomes readable when the process exits, zombie or not (Linux 5.3+);
    // kill(pid, 0) would still succeed on an unreaped zombie.
    const pid_t watched = o.pid ? process : *o.tid;
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, watched, 0));
    pidfd_holder.reset(pidfd);
    lo.child_exited = [watched, pidfd] {
      if (pidfd < 0) return kill(watched, 0) != 0 && errno == ESRCH;
      pollfd p{pidfd, POLLIN, 0};
      return poll(&p, 1, 0) == 1;
    };
  }
  // The status line, about once a second, erased before ptrecord's summary.
  StatusLine status(stderr, o.status_line, SteadyClockMs);
  lo.after_pass = [&] { status.Update(drainer.Totals(), writer->stats().stored_bytes); };
  std::vector<TraceSource*> raw;
  raw.reserve(sources.size());
  for (auto& s : sources) raw.push_back(s.get());
  absl::StatusOr<LoopResult> loop = RunDrainLoop(raw, drainer, signals, lo);
  status.Clear();
  if (!loop.ok()) return loop.status();

  std::vector<CounterValue> values;
  for (CounterSet& c : counter_sets) {
    PTKIT_ASSIGN_OR_RETURN(std::vector<CounterValue> v, c.ReadAll());
    // -p: the threads' sets (of the same counters, in the same order) add up counter by
    // counter, as perf stat -p adds them (-e cycles,cycles stays two).
    if (o.pid && !values.empty() && v.size() == values.size()) {
      for (size_t k = 0; k < v.size(); ++k) {
        values[k].value += v[k].value;
        values[k].time_enabled += v[k].time_enabled;
        values[k].time_running += v[k].time_running;
      }
      continue;
    }
    values.insert(values.end(), v.begin(), v.end());
  }
  if (!values.empty()) PTKIT_RETURN_IF_ERROR(writer->AppendCounters(values));
  // Build-ids of every mapped file and the vdso bytes: decoding needs nothing else from
  // this machine but the files themselves (matched by build-id).
  PTKIT_ASSIGN_OR_RETURN(std::vector<std::string> code_warnings, code.Write(*writer));
  for (std::string& w : code_warnings) result.warnings.push_back(std::move(w));
  if (workload && !result.workload_exit_code) {
    // Stopped by a signal while the workload runs: end it as perf does, then reap it. The
    // exit code is then 128 + the signal that stopped the recording, as a shell shows perf's
    // (130 for Ctrl-C), not the workload's death by our SIGTERM.
    if (loop->stopped_by_signal || loop->stopped_by_control) kill(workload->pid(), SIGTERM);
    if (crash_watcher) crash_watcher->Finish();  // delivers the crash's signal
    const int status = workload->Wait();
    ended = true;
    const bool stopped = loop->stopped_by_signal && signals.last_stop_signal() != 0;
    result.workload_exit_code =
        stopped ? 128 + signals.last_stop_signal() : Workload::ExitCode(status);
    if (stopped) result.stop_signal = signals.last_stop_signal();
    if (!stopped && !loop->stopped_by_control && WIFSIGNALED(status)) {
      result.workload_signal = WTERMSIG(status);
    }
  }
  // The command's end, as the emulation's end metadata has it (a crash too, with
  // --snapshot-on-crash): a recording of a command that died of a signal says so (sweep 29c
  // F3: only ptrecord's exit status did).
  std::optional<CrashInfo> crash = crash_watcher ? crash_watcher->crash() : std::nullopt;
  if (workload && result.workload_exit_code) {
    RecordingMetadata with_end = BuildRecordingMetadata(meta);
    EndMetadata end;
    end.workload_exit_status = *result.workload_exit_code;
    if (crash) {
      end.workload_signal = SignalName(crash->signal);
      end.extra["crash"] = CrashJson(*crash);
    } else if (result.workload_signal != 0) {
      end.workload_signal = SignalName(result.workload_signal);
    }
    if (result.stop_signal != 0) end.stopped_by = SignalName(result.stop_signal);
    with_end.end = std::move(end);
    PTKIT_RETURN_IF_ERROR(writer->AppendMetadata(with_end.ToRecord()));
  }
  if (crash) {
    notes.push_back(absl::StrCat("--snapshot-on-crash: crash snapshot: ", SignalName(crash->signal),
                                 " in thread ", crash->tid, " (pid ", crash->pid, ") at 0x",
                                 absl::Hex(crash->ip)));
  }
  PTKIT_RETURN_IF_ERROR(writer->Close());
  result.totals = drainer.Totals();
  result.notes = std::move(notes);
  result.stopped_by_control = loop->stopped_by_control;
  if (trigger) {
    result.notes.push_back(absl::StrCat(
        "--trigger ", trigger_spec->text, ": ", trigger->hits(), " hits, ", loop->trigger_snapshots,
        " snapshots at them (hits between two drain passes share one)",
        o.trigger_count != 0 && trigger->hits() > trigger->snapshot_hits()
            ? absl::StrCat("; --trigger-count ", o.trigger_count, ": ",
                           trigger->hits() - trigger->snapshot_hits(), " later hits took none")
            : "",
        trigger->ignored() ? absl::StrCat("; ", trigger->ignored(), " hits of other processes")
                           : ""));
    if (trigger->lost() != 0) {
      result.warnings.push_back(absl::StrCat(
          trigger->lost(), " uprobe hits of --trigger were lost (the trigger ring was full)"));
    }
  }
  result.file_bytes = writer->stats().stored_bytes;
  return result;
}

}  // namespace

absl::StatusOr<SessionResult> RunSession(const SessionOptions& o) {
  bool ended = false;
  absl::StatusOr<SessionResult> r = RunSessionUntilEnd(o, ended);
  if (!r.ok() && ended) return AfterCommandEnded(r.status());
  return r;
}

}  // namespace ptkit::record
