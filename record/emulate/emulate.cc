#include "record/emulate/emulate.h"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ptkit/container_writer.h"
#include "ptkit/errno_text.h"
#include "ptkit/status.h"
#include "record/address_filter.h"
#include "record/aux_sample.h"
#include "record/code_capture.h"
#include "record/drain_loop.h"
#include "record/emulate/qemu_backend.h"
#include "record/event_spec.h"
#include "record/metadata.h"
#include "record/perf_event.h"
#include "record/ring_buffer.h"
#include "record/session.h"
#include "record/sim_pmu.h"
#include "record/trace_source.h"
#include "record/workload.h"

namespace ptkit::emulate {
namespace {

using record::Drainer;
using record::KernelTraceSource;
using record::SimulatedPmu;
using record::TraceSource;

// Encoded bytes are handed to the simulated AUX ring in pieces of this size.
constexpr size_t kTraceChunk = 16 << 10;
// JIT code is sent in text pokes of at most this many bytes (PERF_RECORD_TEXT_POKE's lengths
// are 16-bit; a record is at most 64 KiB).
constexpr size_t kPokeBytes = 4096;
// The kernel's sideband rings are drained every this many steps.
constexpr uint64_t kSidebandDrainSteps = 8192;

// A per-thread AUX stream: the simulated PMU seen as the ring of thread `tid`.
class ThreadSource final : public TraceSource {
 public:
  ThreadSource(std::unique_ptr<SimulatedPmu> sim, uint32_t tid) : sim_(std::move(sim)), tid_(tid) {}
  record::RingView ring() override { return sim_->ring(); }
  int poll_fd() const override { return sim_->poll_fd(); }
  void ClearWakeup() override { sim_->ClearWakeup(); }
  absl::Status Enable() override { return sim_->Enable(); }
  absl::Status Disable() override { return sim_->Disable(); }
  StreamId stream() const override { return StreamId{StreamKind::kThread, tid_}; }
  int32_t cpu() const override { return -1; }
  perf::SampleIdLayout layout() const override { return sim_->layout(); }
  SimulatedPmu& sim() { return *sim_; }

 private:
  std::unique_ptr<SimulatedPmu> sim_;
  uint32_t tid_;
};

class Recorder final : public StepSink {
 public:
  Recorder(const EmulateOptions& options, Drainer& drainer, std::FILE* truth)
      : options_(options), drainer_(drainer), truth_(truth) {}

  void OnThreadStart(uint32_t pid, uint32_t tid) override {
    if (!status_.ok()) return;
    record::SimOptions so;
    // A sample record is up to 64 KiB; the ring is drained after each.
    so.data_pages = sampling() ? 32 : 16;
    so.aux_pages = options_.aux_pages;
    so.overwrite = sampling() || options_.snapshot_size.has_value();
    so.cpu = -1;
    so.pid = pid;
    so.tid = tid;
    so.clock = MonotonicNs;  // the sideband's and the trace's clock
    auto sim = SimulatedPmu::Create(so);
    if (!sim.ok()) return Fail(sim.status());
    Thread& t = threads_[tid];
    t.pid = pid;
    t.source = std::make_unique<ThreadSource>(*std::move(sim), tid);
    if (!options_.bts) {
      auto enc = swpt::PtEncoder::Create(options_.pt);
      if (!enc.ok()) return Fail(enc.status());
      t.encoder.emplace(*std::move(enc));
    }
    t.source->sim().WriteItraceStart(pid, tid);
    if (auto early = early_code_.extract(tid)) {
      for (const auto& [ip, bytes] : early.mapped()) OnCode(pid, tid, ip, bytes, true);
    }
  }
  void OnEvent(uint32_t tid, const swpt::Event& e) override {
    if (!status_.ok()) return;
    Thread& t = threads_.at(tid);
    if (!t.encoder) {
      t.bts.Add(e);
      if (t.bts.bytes().size() >= kTraceChunk) Move(t);
      return;
    }
    if (absl::Status s = t.encoder->Add(e); !s.ok()) {
      return Fail(absl::InternalError(
          absl::StrCat("encoding thread ", tid, " at 0x", absl::Hex(e.ip), ": ", s.message())));
    }
    if (t.encoder->bytes().size() >= kTraceChunk) Move(t);
  }
  void OnInstruction(uint32_t tid, uint64_t ip) override {
    // A write error (its disk full) is said at the end (truth_errno); the rest is not written.
    if (truth_ != nullptr && std::fprintf(truth_, "%u 0x%llx\n", tid,
                                          static_cast<unsigned long long>(ip)) < 0) {  // NOLINT
      truth_errno_ = errno;
      truth_ = nullptr;
    }
    if (!sampling() || !status_.ok()) return;
    Thread& t = threads_.at(tid);
    if (++t.instructions % options_.sample_period == 0) Sample(tid, t, ip);
  }
  // JIT code (StepSink::OnCode): each run of consecutive instructions as one
  // PERF_RECORD_TEXT_POKE in the thread's sideband, as the qemu backend sends them, so that
  // the decoder has the code no file holds (sweep 37b L1: 28 % of a JIT program was gaps).
  void OnCode(uint32_t pid, uint32_t tid, uint64_t ip, std::span<const uint8_t> bytes,
              bool no_file) override {
    if (!no_file || !status_.ok()) return;
    auto it = threads_.find(tid);
    if (it == threads_.end()) {
      // The stepper decodes a thread's first instruction before it starts the thread.
      early_code_[tid].emplace_back(ip, std::vector<uint8_t>(bytes.begin(), bytes.end()));
      return;
    }
    Thread& t = it->second;
    if (!t.code.empty() && (ip != t.code_at + t.code.size() || t.code.size() >= kPokeBytes)) {
      WritePoke(t);
    }
    if (t.code.empty()) t.code_at = ip;
    t.code.insert(t.code.end(), bytes.begin(), bytes.end());
  }
  void OnThreadEnd(uint32_t tid) override {
    if (!status_.ok()) return;
    Thread& t = threads_.at(tid);
    WritePoke(t);
    if (t.encoder) {
      if (absl::Status s = t.encoder->Finish(); !s.ok()) return Fail(s);
    }
    Move(t);
    t.source->sim().EndTransaction();
    Drain(*t.source);
    finished_.push_back(std::move(t.source));
    threads_.erase(tid);
  }

  absl::Status status() const { return status_; }
  int truth_errno() const { return truth_errno_; }  // 0: the ground truth was written whole
  uint64_t threads() const { return finished_.size() + threads_.size(); }

  // Snapshot mode: a snapshot of every running thread's ring (SIGUSR2), its pending packets
  // flushed first as the hardware's are when the event is stopped; with `ended`, of every
  // thread that has ended (the end of the recording: all have).
  void SnapshotThreads(bool ended) {
    if (!status_.ok()) return;
    auto take = [&](ThreadSource& source) {
      const uint64_t want =
          *options_.snapshot_size != 0 ? *options_.snapshot_size : source.ring().aux.size();
      auto n = drainer_.Snapshot(source, want);
      if (!n.ok()) Fail(n.status());
    };
    if (ended) {
      for (auto& source : finished_) take(*source);
      return;
    }
    for (auto& [tid, t] : threads_) {
      if (t.encoder) {
        if (absl::Status s = t.encoder->Flush(); !s.ok()) return Fail(s);
      }
      Move(t);
      take(*t.source);
    }
  }

  // Snapshot mode: a snapshot of thread `tid`'s ring only (--trigger), taken as the thread
  // stops at `ip` (the probed function's entry; the instruction there not yet run in the
  // trace): its trace is disabled there first and enabled again after, as the hardware's is
  // around the uprobe's trap into the untraced kernel, so the snapshot ends exactly at `ip`
  // (FUP, TIP.PGD) instead of at the last packet before it. False when the thread is not
  // running.
  bool SnapshotThread(uint32_t tid, uint64_t ip) {
    auto it = threads_.find(tid);
    if (!status_.ok() || it == threads_.end()) return false;
    Thread& t = it->second;
    const bool tracing = t.encoder && t.encoder->tracing();
    const swpt::ExecMode mode = tracing ? t.encoder->mode() : swpt::ExecMode::k64Bit;
    if (tracing) {
      if (absl::Status s = t.encoder->Add(swpt::Event::AsyncDisable(ip)); !s.ok()) {
        Fail(s);
        return false;
      }
    }
    Move(t);
    const uint64_t want =
        *options_.snapshot_size != 0 ? *options_.snapshot_size : t.source->ring().aux.size();
    auto n = drainer_.Snapshot(*t.source, want);
    if (!n.ok()) Fail(n.status());
    if (tracing) {
      if (absl::Status s = t.encoder->Add(swpt::Event::Enable(ip, mode)); !s.ok()) Fail(s);
    }
    return n.ok() && status_.ok();
  }

  // Whether a running (or ended) thread belongs to process `pid`.
  bool HasProcess(uint32_t pid) const {
    for (const auto& [tid, t] : threads_) {
      if (t.pid == pid) return true;
    }
    return false;
  }

 private:
  struct Thread {
    uint32_t pid = 0;
    uint64_t instructions = 0;  // retired so far (AUX sampling counts them)
    std::unique_ptr<ThreadSource> source;
    std::optional<swpt::PtEncoder> encoder;  // Intel PT, or
    swpt::BtsWriter bts;                     // BTS when there is no encoder
    // OnCode's bytes not yet written: consecutive instructions from `code_at` on.
    uint64_t code_at = 0;
    std::vector<uint8_t> code;
  };
  void Fail(const absl::Status& s) {
    if (status_.ok()) status_ = s;
  }
  bool sampling() const { return options_.aux_sample_size != 0; }
  // The instruction at `ip` is about to retire: the pending packets are flushed (the
  // hardware's are when tracing stops for the sample) and moved into the AUX ring, and the
  // sample takes its newest bytes, as the kernel does (SimulatedPmu::WriteSample).
  void Sample(uint32_t tid, Thread& t, uint64_t ip) {
    if (absl::Status s = t.encoder->Flush(); !s.ok()) return Fail(s);
    Move(t);
    const perf::Sample sample{.ip = ip, .pid = t.pid, .tid = tid, .time = MonotonicNs()};
    if (t.source->sim().WriteSample(sample, record::kEmulatedAuxSampleType,
                                    options_.aux_sample_size) == 0) {
      return Fail(absl::InternalError("simulated data ring had no room for an AUX sample"));
    }
    Drain(*t.source);
  }
  void WritePoke(Thread& t) {
    if (t.code.empty()) return;
    ThreadSource& source = *t.source;
    if (!source.sim().WriteTextPoke(t.code_at, t.code)) {
      Drain(source);
      if (!source.sim().WriteTextPoke(t.code_at, t.code)) {
        return Fail(absl::InternalError("simulated data ring had no room for a text poke"));
      }
    }
    t.code.clear();
    Drain(source);
  }
  void Drain(TraceSource& source) {
    auto n = drainer_.DrainOnce(source);
    if (!n.ok()) Fail(n.status());
  }
  // Hands the encoded bytes to the simulated AUX ring in chunks of at most kTraceChunk,
  // draining after each. The drain consumes everything up to the last PERF_RECORD_AUX, so
  // less than one watermark (half the ring) stays unread and a chunk always fits: the ring
  // never truncates. A short write would be a bug; it is an error, never silent loss.
  void Move(Thread& t) {
    std::vector<uint8_t> bytes = t.encoder ? t.encoder->TakeBytes() : t.bts.TakeBytes();
    std::span<const uint8_t> left(bytes);
    const size_t max_chunk = std::min(kTraceChunk, t.source->ring().aux.size() / 2);
    while (!left.empty() && status_.ok()) {
      std::span<const uint8_t> chunk = left.first(std::min(left.size(), max_chunk));
      uint64_t n = t.source->sim().WriteTrace(chunk);
      if (n != chunk.size()) {
        return Fail(absl::InternalError(
            absl::StrCat("simulated AUX ring took ", n, " of ", chunk.size(), " bytes")));
      }
      left = left.subspan(n);
      Drain(*t.source);
    }
  }

  const EmulateOptions& options_;
  Drainer& drainer_;
  std::FILE* truth_;  // null once a write failed
  int truth_errno_ = 0;
  std::map<uint32_t, Thread> threads_;
  // OnCode's for threads not started yet (tid -> address, bytes).
  std::map<uint32_t, std::vector<std::pair<uint64_t, std::vector<uint8_t>>>> early_code_;
  std::vector<std::unique_ptr<ThreadSource>> finished_;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<EmulatedEvent> ParseEmulatedEvent(std::string_view text) {
  PTKIT_ASSIGN_OR_RETURN(record::EventSpec spec, record::ParseEventString(text));
  if (spec.kernel && !spec.user) {
    return absl::InvalidArgumentError(absl::StrCat("--emulate traces user space only; '",
                                                   std::string(text),
                                                   "' asks for the kernel: drop the 'k' modifier"));
  }
  EmulatedEvent e;
  if (spec.pmu == "intel_bts") {
    e.bts = true;
    if (!spec.terms.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("intel_bts takes no terms ('", spec.terms[0].name, "')"));
    }
    return e;
  }
  if (spec.pmu != "intel_pt") {
    return absl::InvalidArgumentError(
        absl::StrCat("--emulate produces intel_pt or intel_bts traces, not '", spec.pmu, "'"));
  }
  e.pt.tsc = true;
  auto bounded = [](const record::EventTerm& t, uint64_t max) -> absl::StatusOr<uint8_t> {
    if (t.value > max) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, "=", t.value, " is out of range (0..", max, ")"));
    }
    return static_cast<uint8_t>(t.value);
  };
  for (const record::EventTerm& t : spec.terms) {
    if (t.name == "noretcomp") {
      PTKIT_ASSIGN_OR_RETURN(uint8_t v, bounded(t, 1));
      e.pt.ret_compression = v == 0;
    } else if (t.name == "psb_period") {
      PTKIT_ASSIGN_OR_RETURN(e.pt.psb_period, bounded(t, 15));
    } else if (t.name == "tsc") {
      PTKIT_ASSIGN_OR_RETURN(uint8_t v, bounded(t, 1));
      e.pt.tsc = v != 0;
    } else if (t.name == "mtc") {
      PTKIT_ASSIGN_OR_RETURN(uint8_t v, bounded(t, 1));
      e.pt.mtc = v != 0;
    } else if (t.name == "mtc_period") {
      PTKIT_ASSIGN_OR_RETURN(e.pt.mtc_freq, bounded(t, 15));
    } else if (t.name == "cyc") {
      PTKIT_ASSIGN_OR_RETURN(uint8_t v, bounded(t, 1));
      e.pt.cyc = v != 0;
    } else if (t.name == "cyc_thresh") {
      PTKIT_ASSIGN_OR_RETURN(e.pt.cyc_thresh, bounded(t, 15));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--emulate does not model the intel_pt term '", t.name,
                       "'; it supports noretcomp, psb_period, tsc, mtc, mtc_period, cyc, "
                       "cyc_thresh"));
    }
  }
  return e;
}

uint64_t MonotonicNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

std::string WaitingNotice(const std::vector<uint32_t>& pids) {
  return absl::StrCat("the command exited; waiting for ",
                      pids.size() == 1
                          ? "a process it started that still runs"
                          : absl::StrCat(pids.size(), " processes it started that still run"),
                      " (pid ", absl::StrJoin(pids, ", "),
                      "), as its trace goes on (SIGINT or SIGTERM stop the recording and keep it)");
}

absl::StatusOr<std::unique_ptr<ContainerWriter>> CreateEmulatedWriter(
    const EmulateOptions& options) {
  WriterOptions wo;
  wo.compress = options.compress;
  wo.overwrite = options.overwrite_existing;
  absl::StatusOr<std::unique_ptr<ContainerWriter>> created =
      ContainerWriter::Create(options.output, wo);
  if (created.status().code() == absl::StatusCode::kAlreadyExists) {
    absl::Status s = absl::AlreadyExistsError(
        absl::StrCat(created.status().message(), " (-o FILE, or --overwrite-existing)"));
    s.SetPayload(record::kExitCodePayload, absl::Cord("2"));
    return s;
  }
  return created;
}

record::MetadataInput EmulatedMetadataInput(const EmulateOptions& options,
                                            const perf_event_attr& tracking, uint64_t data_pages,
                                            uint64_t aux_pages) {
  record::MetadataInput mi;
  mi.command_line = options.command_line;
  mi.workload = options.argv;
  mi.cpu = record::ReadCpuId();
  // The trace's MTC and TMA packets count the encoder's crystal clock, not this CPU's (sweep
  // 40a F5: the host's CPUID.15H was recorded; 0 on this machine, so MTC was left unused; an
  // Intel host's would have decoded the time wrong).
  mi.cpu.tsc_ratio_numerator = options.pt.cpuid_0x15_ebx;
  mi.cpu.tsc_ratio_denominator = options.pt.cpuid_0x15_eax;
  mi.cpu.crystal_hz = options.pt.cpuid_0x15_ebx == 0
                          ? 0
                          : static_cast<uint32_t>(1000000000 / options.pt.cpuid_0x15_ebx *
                                                  options.pt.cpuid_0x15_eax);
  mi.event = options.bts ? "intel_bts//u (emulated)" : "intel_pt//u (emulated)";
  mi.attrs = {{"tracking", tracking}};
  if (options.aux_sample_size != 0) {  // named as the kernel path names its sampler
    mi.attrs.emplace_back(
        "aux-sample", record::EmulatedAuxSampleAttr(options.sample_period, options.aux_sample_size,
                                                    tracking.inherit));
  }
  // TSC = perf time = CLOCK_MONOTONIC ns: the identity conversion, 1 GHz.
  mi.time = record::TimeConversion{.cap_user_time = false,
                                   .cap_user_time_zero = true,
                                   .time_shift = 0,
                                   .time_mult = 1,
                                   .time_zero = 0};
  mi.page_size = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  mi.mode = "full-trace";
  mi.data_pages = data_pages;
  mi.aux_pages = aux_pages;
  return mi;
}

absl::Status CheckEmulatedModes(const EmulateOptions& options, uint64_t aux_pages) {
  const uint64_t area = aux_pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (options.snapshot_size && *options.snapshot_size > area) {
    // (Sweep 30a F9: a size beyond the ring was cut to it, unsaid; the step backend's ring is
    // 64 pages unless -m says otherwise, qemu's 1024.)
    absl::Status bad = absl::InvalidArgumentError(absl::StrCat(
        "--snapshot ", *options.snapshot_size >> 10, "K: larger than each thread's AUX ring (",
        area >> 10, " KiB: -m DATA_PAGES,AUX_PAGES sets it); give at most ", area >> 10,
        "K, or a larger ring"));
    bad.SetPayload(record::kExitCodePayload, absl::Cord("2"));
    return bad;
  }
  if (options.snapshot_size &&
      aux_pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) > kMaxPayloadSize / 2) {
    absl::Status bad = absl::InvalidArgumentError(absl::StrCat(
        "--snapshot: an AUX ring of ", aux_pages, " pages is more than one snapshot can hold (",
        (kMaxPayloadSize / 2) >> 20, " MiB): give -m a smaller AUX size"));
    bad.SetPayload(record::kExitCodePayload, absl::Cord("2"));
    return bad;
  }
  if (options.aux_sample_size != 0) {
    absl::Status bad =
        record::CheckAuxSampleSize(options.aux_sample_size, aux_pages * ::sysconf(_SC_PAGESIZE));
    if (bad.ok() && options.bts) {
      bad = absl::InvalidArgumentError(
          "--aux-sample needs intel_pt (intel_bts cannot take AUX samples)");
    }
    if (bad.ok() && options.snapshot_size) {
      bad = absl::InvalidArgumentError("--aux-sample and --snapshot exclude each other");
    }
    if (bad.ok() && options.sample_period == 0) {
      bad = absl::InvalidArgumentError("--aux-sample needs a sample period of 1 or more");
    }
    if (!bad.ok()) {
      bad.SetPayload(record::kExitCodePayload, absl::Cord("2"));
      return bad;
    }
  }
  if ((options.trigger || options.snapshot_on_crash) && !options.snapshot_size) {
    absl::Status bad = absl::InvalidArgumentError(
        "--trigger and --snapshot-on-crash take snapshots: they need snapshot mode");
    bad.SetPayload(record::kExitCodePayload, absl::Cord("2"));
    return bad;
  }
  return absl::OkStatus();
}

nlohmann::json TriggerEndJson(const EmulateOptions& options, uint64_t hits, uint64_t snapshots) {
  nlohmann::json j = {{"spec", options.trigger->text},
                      {"file", options.trigger->file},
                      {"offset", options.trigger->offset},
                      {"hits", hits},
                      {"snapshots", snapshots}};
  if (options.trigger_count != 0) j["count"] = options.trigger_count;
  return j;
}

absl::StatusOr<std::vector<record::AddressFilter>> ParseEmulatedFilters(const std::string& text) {
  if (text.empty()) return std::vector<record::AddressFilter>{};
  // A bad filter is a bad option value: ptrecord exits 2.
  auto usage = [](absl::Status s) {
    s.SetPayload(record::kExitCodePayload, absl::Cord("2"));
    return s;
  };
  absl::StatusOr<std::vector<record::AddressFilter>> parsed = record::ParseAddressFilters(text);
  if (!parsed.ok()) return usage(parsed.status());
  for (const record::AddressFilter& f : *parsed) {
    if (f.action != record::AddressFilter::Action::kFilter || f.file.empty()) {
      return usage(absl::InvalidArgumentError(absl::StrCat(
          "--emulate supports 'filter' regions of files only (not start, stop, tracestop or "
          "kernel addresses): '",
          text, "'")));
    }
  }
  return parsed;
}

namespace {

// RecordEmulated's single-stepping, with `ended` set once the command has exited (its errors
// after that are not the command's end).
absl::StatusOr<EmulateResult> RecordStepped(const EmulateOptions& options, bool& ended) {
  // SIGINT / SIGTERM / SIGHUP end the run cleanly; from here on they cannot kill ptrecord.
  record::SignalWatcher signals(record::SignalWatcher::Delivery::kInterrupting);
  const uint64_t stops0 = signals.stop_count();
  const uint64_t snapshots0 = signals.snapshot_count();

  PTKIT_ASSIGN_OR_RETURN(std::vector<record::AddressFilter> filters,
                         ParseEmulatedFilters(options.filter));
  PTKIT_RETURN_IF_ERROR(CheckEmulatedModes(options, options.aux_pages));
  PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ContainerWriter> writer, CreateEmulatedWriter(options));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> truth(nullptr, &std::fclose);
  // Until the workload runs, a failure leaves no file behind (it would refuse the re-run);
  // after that, the container stays without footer (the writer is abandoned).
  bool ran = false;
  absl::Cleanup discard_unless_ran = [&] {
    if (ran) return;
    writer->Discard();
    truth.reset();
    std::error_code ec;
    if (!options.ground_truth.empty()) std::filesystem::remove(options.ground_truth, ec);
  };
  if (!options.ground_truth.empty()) {
    // ("e": close-on-exec, not the command's; sweep 38b L6.)
    truth.reset(std::fopen(options.ground_truth.c_str(), "we"));
    if (!truth) return ErrnoStatus(errno, "create ", options.ground_truth);
  }

  // Real sideband: a dummy tracking event per CPU on the workload, opened while it waits to
  // exec, enabled by the exec.
  perf_event_attr tracking = record::BuildTrackingAttr({
      .enable_on_exec = true,
      .inherit = true,
      // User space only, as the emulated trace (dummy:u): the task records need no kernel
      // sampling, and an unprivileged user may open it at perf_event_paranoid 2 (sweep 38b M2:
      // every non-root user was refused, told to become root).
      .exclude_kernel = true,
      // Every single step stops and resumes the thread: with context_switch on, that is two
      // SWITCH records per instruction, which would flood the ring. The streams are per
      // thread, so the decoder needs no schedule.
      .context_switch = false,
      // MMAP2 records carry the mapped file's build-id instead of its inode (Linux 5.12): the
      // decoder warns when the file it reads is another build.
      .build_id = true,
      // The emulated trace's clock (see StepperOptions::clock): the sideband's timestamps and
      // the TSC packets are both CLOCK_MONOTONIC nanoseconds, so trace and sideband order
      // exactly.
      .clockid = CLOCK_MONOTONIC,
  });
  std::vector<std::unique_ptr<KernelTraceSource>> sideband;
  // The online CPUs by number (they need not be 0..N-1).
  PTKIT_ASSIGN_OR_RETURN(std::string online_text,
                         record::ReadSystemFile("/sys/devices/system/cpu/online"));
  PTKIT_ASSIGN_OR_RETURN(std::vector<int> cpus, record::ParseCpuList(online_text));
  RecordingMetadata meta;
  std::optional<record::UprobeTrigger> trigger;  // --trigger
  std::optional<record::CrashInfo> crash;        // --snapshot-on-crash, once it happened
  StepperOptions so;
  so.argv = options.argv;
  so.max_steps = options.max_steps;
  so.filters = filters;
  bool said_snapshot = false;
  uint64_t snapshots_seen = snapshots0;
  std::function<void()> snapshot_threads;  // set once the recorder exists
  // Set once the recording failed (a full disk): stepping on would trace into nothing.
  std::function<bool()> failed = [] { return false; };
  so.stop_requested = [&] {
    if (failed()) return true;
    if (options.snapshot_size) {
      if (signals.snapshot_count() != snapshots_seen) {
        snapshots_seen = signals.snapshot_count();
        snapshot_threads();
      }
    } else if (signals.snapshot_count() != snapshots0 && !said_snapshot && options.notice) {
      said_snapshot = true;
      options.notice(
          "SIGUSR2 ignored: not recording with --snapshot (the whole run is recorded; "
          "SIGINT or SIGTERM stop it and keep what was traced)");
    }
    return signals.stop_count() != stops0;
  };
  so.clock = MonotonicNs;
  if (options.notice) {
    so.command_exited = [&options](const std::vector<uint32_t>& pids) {
      options.notice(WaitingNotice(pids));
    };
  }
  // Progress on a terminal, about once a second, on one line (cleared at the end).
  bool progress_shown = false;
  if (options.status_line) {
    so.progress = [&progress_shown](const StepperResult& r) {
      std::fprintf(stderr, "\rptrecord: %llu steps, %llu instructions, %.0f steps/s\033[K",
                   static_cast<unsigned long long>(r.steps),         // NOLINT
                   static_cast<unsigned long long>(r.instructions),  // NOLINT
                   r.seconds > 0 ? static_cast<double>(r.steps) / r.seconds : 0.0);
      progress_shown = true;
    };
  }
  // The command runs: the container takes its path (a file it replaces goes).
  so.after_exec = [&] { return writer->Publish(); };
  pid_t workload = 0;  // the command's process (before_exec)
  so.before_exec = [&](pid_t pid) -> absl::Status {
    workload = pid;
    const record::MlockLimits limits = record::ReadMlockLimits();
    for (int cpu : cpus) {
      PTKIT_ASSIGN_OR_RETURN(
          std::unique_ptr<KernelTraceSource> source,
          record::OpenTrackingSource(tracking, pid, cpu,
                                     StreamId{StreamKind::kCpu, static_cast<uint64_t>(cpu)},
                                     options.data_pages, cpus.size(), limits, "tracking event"));
      sideband.push_back(std::move(source));
    }
    if (options.trigger) {
      PTKIT_ASSIGN_OR_RETURN(trigger,
                             record::UprobeTrigger::Open(*options.trigger, cpus, CLOCK_MONOTONIC));
      trigger->set_snapshot_limit(options.trigger_count);
    }
    meta = record::BuildRecordingMetadata(
        EmulatedMetadataInput(options, tracking, options.data_pages, options.aux_pages));
    meta.emulated = RecordingMetadata::kEmulatedStep;
    if (options.aux_sample_size != 0) meta.mode = "aux-sample";
    if (options.snapshot_size) meta.mode = "snapshot";
    meta.clock = "CLOCK_MONOTONIC ns (emulated: TSC packets and sideband use it)";
    meta.emulation =
        EmulationMetadata{.backend = "ptrace single-step",
                          .streams = "per-thread",
                          .format = options.bts ? "bts" : "pt",
                          .ret_compression = options.pt.ret_compression,
                          .psb_period = options.pt.psb_period,
                          .tsc = options.pt.tsc,
                          .mtc = options.pt.mtc,
                          .cyc = options.pt.cyc,
                          .mtc_period = options.pt.mtc_freq,
                          .cyc_thresh = options.pt.cyc_thresh,
                          .filter = record::KernelFilterString(filters),
                          .note = "software Intel PT from a single-stepped run, not hardware"};
    return writer->AppendMetadata(meta.ToRecord());
  };

  // The build-ids of mapped files and the vdso (and with --archive the mapped code), from the
  // kernel's MMAP2 records, as the kernel path stores them.
  record::CodeCapture code(options.archive);
  record::DrainOptions dopt;
  if (options.aux_sample_size != 0) dopt.sample_type = record::kEmulatedAuxSampleType;
  dopt.on_record = [&code](const perf::RecordView& r, const perf::SampleIdLayout& l) {
    code.OnRecord(r, l);
  };
  Drainer drainer(writer.get(), dopt);
  Recorder recorder(options, drainer, truth.get());
  // Drain the sideband rings now and then while stepping.
  struct PeriodicSink final : StepSink {
    Recorder& inner;
    std::function<void()> drain;
    uint64_t count = 0;
    PeriodicSink(Recorder& r, std::function<void()> d) : inner(r), drain(std::move(d)) {}
    void OnThreadStart(uint32_t pid, uint32_t tid) override { inner.OnThreadStart(pid, tid); }
    void OnEvent(uint32_t tid, const swpt::Event& e) override {
      inner.OnEvent(tid, e);
      // With --filter, threads run free between events: drain on those too.
      if (++count % kSidebandDrainSteps == 0) drain();
    }
    void OnInstruction(uint32_t tid, uint64_t ip) override {
      inner.OnInstruction(tid, ip);
      if (retired) retired(tid, ip);
      if (++count % kSidebandDrainSteps == 0) drain();
    }
    std::function<void(uint32_t, uint64_t)> retired;  // --trigger
    void OnThreadEnd(uint32_t tid) override { inner.OnThreadEnd(tid); }
    void OnCode(uint32_t pid, uint32_t tid, uint64_t ip, std::span<const uint8_t> b,
                bool no_file) override {
      inner.OnCode(pid, tid, ip, b, no_file);
    }
    // The new program's MMAP2s while it still exists: its [vdso] is read then (an i386
    // program's is not ptrecord's).
    void OnExec(uint32_t pid) override { drain(); }
  };
  absl::Status sideband_status;
  auto drain_sideband = [&] {
    for (auto& s : sideband) {
      auto n = drainer.DrainOnce(*s);
      if (!n.ok() && sideband_status.ok()) sideband_status = n.status();
    }
  };
  failed = [&] { return !recorder.status().ok() || !sideband_status.ok(); };
  snapshot_threads = [&] { recorder.SnapshotThreads(/*ended=*/false); };
  PeriodicSink sink(recorder, drain_sideband);
  // --trigger: the uprobe's hits, read after every retired instruction (a load of each ring's
  // head). A hit is written while its thread steps FUNC's first instruction, so it is there
  // when that instruction's retirement is reported: the snapshot is taken then. A hit read
  // while another thread is reported waits for its own thread.
  std::map<uint32_t, std::deque<uint64_t>> waiting_hits;  // tid -> IPs hit, not yet retired
  absl::Status trigger_status;
  uint64_t trigger_snapshots = 0;
  if (options.trigger) {  // opened before the exec, so not yet here
    sink.retired = [&](uint32_t tid, uint64_t ip) {
      if (trigger && trigger->Pending()) {
        absl::StatusOr<std::vector<record::TriggerHit>> hits =
            trigger->Poll([&](uint32_t pid) { return recorder.HasProcess(pid); });
        if (!hits.ok() && trigger_status.ok()) trigger_status = hits.status();
        if (hits.ok()) {
          for (const record::TriggerHit& h : *hits) waiting_hits[h.tid].push_back(h.ip);
        }
      }
      auto w = waiting_hits.find(tid);
      if (w == waiting_hits.end() || w->second.empty() || w->second.front() != ip) return;
      w->second.pop_front();
      if (trigger->TakeForSnapshots(1) == 1 && recorder.SnapshotThread(tid, ip))
        ++trigger_snapshots;
    };
  }
  so.on_fatal_signal = [&](uint32_t pid, uint32_t tid, int sig, uint64_t ip) {
    // A crash of a process the command forked is not the command's (sweep 30a F1: it was taken
    // as the crash, its snapshot the last, the command's trace after it dropped unsaid).
    if (!options.snapshot_on_crash || crash || pid != static_cast<uint32_t>(workload)) return;
    crash = record::CrashInfo{.pid = pid, .tid = tid, .signal = sig, .ip = ip};
    // Its snapshot is the end round below: each thread's ring stays as it ended, and the
    // process's other threads end their streams where they stopped (sweep 30a F3: a snapshot
    // taken here left them without their last instructions, 5 and 8 in the sweep, unsaid).
  };
  absl::StatusOr<StepperResult> stepped = RunStepped(so, sink);
  ran = recorder.threads() > 0;
  if (progress_shown) std::fputs("\r\033[K", stderr);
  if (!stepped.ok()) {
    if (writer) writer->Abandon().IgnoreError();  // no footer: the recording failed
    return stepped.status();
  }
  const StepperResult& steps = *stepped;
  ended = !steps.stop_requested;  // (else stopped, and the workload killed, for a failed write)
  drain_sideband();
  // The end round (with a crash: its snapshot, the last round).
  if (options.snapshot_size) recorder.SnapshotThreads(/*ended=*/true);
  PTKIT_RETURN_IF_ERROR(recorder.status());
  PTKIT_RETURN_IF_ERROR(sideband_status);
  PTKIT_RETURN_IF_ERROR(trigger_status);
  int truth_errno = recorder.truth_errno();
  if (truth && truth_errno == 0 && (std::fflush(truth.get()) != 0 || std::ferror(truth.get()))) {
    truth_errno = errno != 0 ? errno : EIO;
  }
  EmulateResult result;
  PTKIT_ASSIGN_OR_RETURN(result.warnings, code.Write(*writer));
  // The recording is whole: a ground truth that could not be written is cut and said, as the
  // qemu backend's (it failed the whole recording: sweep 38b L2).
  if (truth_errno != 0) {
    result.warnings.push_back(absl::StrCat("the ground truth ", options.ground_truth,
                                           " is cut where it could not be written (write: ",
                                           ErrnoText(truth_errno), "); the trace is whole"));
  }

  result.steps = steps;
  result.totals = drainer.Totals();
  result.crash = crash;
  uint64_t unmatched = 0;  // hits whose instruction was never reported retired
  for (const auto& [tid, ips] : waiting_hits) unmatched += ips.size();
  if (trigger) {
    result.trigger_hits = trigger->hits();
    result.trigger_snapshots = trigger_snapshots;
    if (unmatched != 0) {
      result.warnings.push_back(absl::StrCat(
          unmatched, " uprobe hits of --trigger ", trigger->spec().text,
          " took no snapshot: their thread never retired the probed instruction as a step of "
          "its own (it ended first, or the kernel emulated the instruction)"));
    }
    if (trigger->lost() != 0) {
      result.warnings.push_back(absl::StrCat(trigger->lost(), " uprobe hits of --trigger ",
                                             trigger->spec().text,
                                             " were lost (the trigger ring was full)"));
    }
  }
  result.threads = recorder.threads();
  result.exit_code = steps.exit_status;
  // A Ctrl-C also reaches the workload (its process group), which may die of it before the
  // stepper asks: stopped by the signal either way.
  if (steps.stop_requested || signals.stop_count() != stops0) {
    result.stop_signal = signals.last_stop_signal();
    result.exit_code = 128 + result.stop_signal;
  }
  // How it ended, after the fact: a second metadata record (readers merge them in order).
  EndMetadata end{.instructions = steps.instructions,
                  .threads = result.threads,
                  .workload_exit_status = steps.exit_status};
  if (steps.exit_signal != 0) end.workload_signal = SignalName(steps.exit_signal);
  if (result.stop_signal != 0) {
    end.stopped_by = SignalName(result.stop_signal);
  } else if (steps.step_limit_hit) {
    end.stopped_by = "--max-steps";
  }
  if (trigger) {
    end.extra["trigger"] = TriggerEndJson(options, result.trigger_hits, result.trigger_snapshots);
    end.extra["trigger"]["other_processes_hits"] = trigger->ignored();
  }
  if (crash) {
    end.extra["crash"] = record::CrashJson(*crash);
  }
  // What ptrecord warned of stays with the recording: every decode says it too.
  if (!result.warnings.empty()) end.extra["warnings"] = result.warnings;
  meta.end = std::move(end);
  PTKIT_RETURN_IF_ERROR(writer->AppendMetadata(meta.ToRecord()));
  PTKIT_RETURN_IF_ERROR(writer->Close());
  return result;
}

}  // namespace

absl::StatusOr<EmulateResult> RecordEmulated(const EmulateOptions& options) {
  if (options.backend == "qemu") return RecordQemu(options);
  bool ended = false;
  absl::StatusOr<EmulateResult> r = RecordStepped(options, ended);
  if (!r.ok() && ended) return record::AfterCommandEnded(r.status());
  return r;
}

}  // namespace ptkit::emulate
