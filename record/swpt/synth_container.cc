#include "record/swpt/synth_container.h"

#include <linux/perf_event.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <span>

#include "nlohmann/json.hpp"
#include "ptkit/container_writer.h"
#include "ptkit/status.h"
#include "record/metadata.h"
#include "record/pmu_registry.h"

namespace ptkit::swpt {
namespace {

constexpr uint32_t kIntelPtType = 8;  // Typical dynamic PMU types; only recorded.
constexpr uint32_t kIntelBtsType = 9;

// Appends perf records (perf_event_open(2) layouts) with the sample_id trailer of
// sample_type TID|TIME (sample_id_all).
class SidebandBuilder {
 public:
  SidebandBuilder(uint32_t pid, uint32_t tid) : pid_(pid), tid_(tid) {}

  void Comm(const std::string& comm, uint64_t time) {
    std::vector<uint8_t> body;
    Put32(body, pid_);
    Put32(body, tid_);
    PutString(body, comm);
    Finish(PERF_RECORD_COMM, 0, body, time);
  }
  void Mmap2(uint64_t addr, uint64_t len, uint64_t pgoff, const std::string& file, uint64_t time) {
    std::vector<uint8_t> body;
    Put32(body, pid_);
    Put32(body, tid_);
    Put64(body, addr);
    Put64(body, len);
    Put64(body, pgoff);
    Put32(body, 0);  // maj
    Put32(body, 0);  // min
    Put64(body, 0);  // ino
    Put64(body, 0);  // ino_generation
    Put32(body, PROT_READ | PROT_EXEC);
    Put32(body, MAP_PRIVATE);
    PutString(body, file);
    Finish(PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER, body, time);
  }
  void ItraceStart(uint64_t time) {
    std::vector<uint8_t> body;
    Put32(body, pid_);
    Put32(body, tid_);
    Finish(PERF_RECORD_ITRACE_START, 0, body, time);
  }
  void Aux(uint64_t offset, uint64_t size, uint64_t time) {
    std::vector<uint8_t> body;
    Put64(body, offset);
    Put64(body, size);
    Put64(body, 0);  // flags
    Finish(PERF_RECORD_AUX, 0, body, time);
  }
  void Exit(uint64_t time) {
    std::vector<uint8_t> body;
    Put32(body, pid_);
    Put32(body, 1);  // ppid
    Put32(body, tid_);
    Put32(body, 1);  // ptid
    Put64(body, time);
    Finish(PERF_RECORD_EXIT, 0, body, time);
  }
  const std::vector<uint8_t>& bytes() const { return out_; }

 private:
  static void Put32(std::vector<uint8_t>& v, uint32_t x) {
    uint8_t b[4];
    std::memcpy(b, &x, 4);
    v.insert(v.end(), b, b + 4);
  }
  static void Put64(std::vector<uint8_t>& v, uint64_t x) {
    uint8_t b[8];
    std::memcpy(b, &x, 8);
    v.insert(v.end(), b, b + 8);
  }
  // NUL-terminated, padded to a multiple of 8 bytes (as the kernel does).
  static void PutString(std::vector<uint8_t>& v, const std::string& s) {
    size_t n = (s.size() + 1 + 7) & ~size_t{7};
    v.insert(v.end(), s.begin(), s.end());
    v.insert(v.end(), n - s.size(), 0);
  }
  void Finish(uint32_t type, uint16_t misc, std::vector<uint8_t>& body, uint64_t time) {
    Put32(body, pid_);  // sample_id: TID (pid, tid), TIME
    Put32(body, tid_);
    Put64(body, time);
    perf_event_header h{};
    h.type = type;
    h.misc = misc;
    h.size = static_cast<uint16_t>(sizeof(h) + body.size());
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&h);
    out_.insert(out_.end(), p, p + sizeof(h));
    out_.insert(out_.end(), body.begin(), body.end());
  }
  uint32_t pid_, tid_;
  std::vector<uint8_t> out_;
};

record::Pmu IntelPtPmu(const SynthOptions& options) {
  record::Pmu pmu;
  pmu.name = "intel_pt";
  pmu.type = kIntelPtType;
  // The format fields every intel_pt PMU has (DESIGN.md, "The kernel interface").
  const std::pair<const char*, const char*> formats[] = {{"pt", "config:0"},
                                                         {"cyc", "config:1"},
                                                         {"pwr_evt", "config:4"},
                                                         {"fup_on_ptw", "config:5"},
                                                         {"mtc", "config:9"},
                                                         {"tsc", "config:10"},
                                                         {"noretcomp", "config:11"},
                                                         {"ptw", "config:12"},
                                                         {"branch", "config:13"},
                                                         {"mtc_period", "config:14-17"},
                                                         {"cyc_thresh", "config:19-22"},
                                                         {"psb_period", "config:24-27"},
                                                         {"event", "config:31"},
                                                         {"notnt", "config:55"}};
  for (const auto& [name, spec] : formats) pmu.formats[name] = *record::ParseFormatSpec(spec);
  pmu.caps = {{"psb_cyc", "1"},        {"mtc", "1"},           {"ip_filtering", "1"},
              {"psb_periods", "ffff"}, {"mtc_periods", "249"}, {"cycle_thresholds", "3fff"}};
  pmu.max_nonturbo_ratio = options.pt.cbr;
  pmu.tsc_art_numerator = options.pt.cpuid_0x15_ebx;
  pmu.tsc_art_denominator = options.pt.cpuid_0x15_eax;
  return pmu;
}

}  // namespace

absl::Status WriteSynthContainer(const std::string& path, const CodeImage& image,
                                 const SynthOptions& options, const SynthResult& result,
                                 const SynthContainerOptions& container) {
  if (container.bts && !options.bts) {
    return absl::InvalidArgumentError("a BTS container needs a walk with SynthOptions::bts");
  }
  const std::vector<uint8_t>& trace_bytes = container.bts ? result.bts : result.pt;
  const PtEncoderOptions& pt = options.pt;
  record::Pmu pmu = IntelPtPmu(options);
  uint64_t config = 0;
  auto set = [&](const char* field, uint64_t value) {
    config = *pmu.formats.at(field).Apply(config, value);
  };
  set("pt", 1);
  set("branch", 1);
  set("tsc", pt.tsc);
  set("mtc", pt.mtc);
  set("cyc", pt.cyc);
  set("noretcomp", !pt.ret_compression);
  set("psb_period", pt.psb_period);
  set("mtc_period", pt.mtc_freq);
  set("cyc_thresh", pt.cyc_thresh);

  perf_event_attr trace{};
  trace.size = sizeof(trace);
  trace.type = kIntelPtType;
  trace.config = config;
  if (container.bts) {
    pmu = record::Pmu{};
    pmu.name = "intel_bts";
    pmu.type = kIntelBtsType;
    trace.type = kIntelBtsType;
    trace.config = 0;
  }
  trace.exclude_kernel = 1;
  trace.exclude_hv = 1;
  trace.sample_id_all = 1;
  trace.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
  perf_event_attr tracking{};
  tracking.size = sizeof(tracking);
  tracking.type = PERF_TYPE_SOFTWARE;
  tracking.config = PERF_COUNT_SW_DUMMY;
  tracking.mmap = tracking.mmap2 = tracking.comm = tracking.task = 1;
  tracking.sample_id_all = 1;
  tracking.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;

  record::MetadataInput in;
  in.command_line = container.command_line;
  in.workload = {image.path()};
  in.cpu.vendor = "GenuineIntel";
  in.cpu.family = 6;
  in.cpu.tsc_ratio_numerator = pt.cpuid_0x15_ebx;
  in.cpu.tsc_ratio_denominator = pt.cpuid_0x15_eax;
  in.pmu = pmu;
  in.event = container.bts ? "intel_bts//u" : "intel_pt//u";
  in.attrs = {{pmu.name, trace}, {"tracking", tracking}};
  in.time = record::TimeConversion{true, true, 0, 1, 0};
  in.page_size = 4096;
  in.mode = "full-trace";
  RecordingMetadata meta = record::BuildRecordingMetadata(in);
  meta.tool = "swpt_synth";
  meta.emulated = RecordingMetadata::kEmulatedSynthesized;
  meta.synthesizer = SynthesizerMetadata{.elf = image.path(),
                                         .entry = options.entry,
                                         .stop = result.stop_reason,
                                         .load_base = image.load_base(),
                                         .seed = options.seed,
                                         .max_insns = options.max_insns,
                                         .insns = result.insns};

  // Sideband times (= TSC): the process exists and maps its image before the trace starts.
  uint64_t t0 = pt.tsc_start > 1000 ? pt.tsc_start - 1000 : 0;
  SidebandBuilder sb(container.pid, container.tid);
  // The kernel reports mapped files by absolute path.
  std::error_code ec;
  std::string file = std::filesystem::absolute(image.path(), ec).lexically_normal().string();
  if (ec) file = image.path();
  std::string comm = image.path().substr(image.path().find_last_of('/') + 1).substr(0, 15);
  sb.Comm(comm, t0);
  for (const LoadSegment& seg : image.segments()) {
    if (!container.map_image || !seg.exec || seg.filesz == 0) continue;
    uint64_t addr = seg.vaddr & ~uint64_t{0xfff};
    uint64_t len = ((seg.vaddr + seg.memsz + 0xfff) & ~uint64_t{0xfff}) - addr;
    sb.Mmap2(addr, len, seg.file_offset - (seg.vaddr - addr), file, t0 + 1);
  }
  sb.ItraceStart(t0 + 2);
  uint64_t end_time = pt.tsc_start + result.insns;  // Roughly one cycle per instruction.
  std::vector<AuxRecord> aux;
  for (size_t off = 0; off < trace_bytes.size(); off += container.aux_chunk) {
    size_t n = std::min(container.aux_chunk, trace_bytes.size() - off);
    AuxRecord r;
    r.stream = {StreamKind::kThread, container.tid};
    r.aux_offset = off;
    r.time = pt.tsc_start + (result.insns * (off + n)) / std::max<size_t>(1, trace_bytes.size());
    r.data = std::span<const uint8_t>(trace_bytes.data() + off, n);
    sb.Aux(off, n, r.time);
    aux.push_back(r);
  }
  sb.Exit(end_time + 1);

  WriterOptions wopts;
  wopts.overwrite = container.overwrite;
  PTKIT_ASSIGN_OR_RETURN(auto writer, ContainerWriter::Create(path, wopts));
  PTKIT_RETURN_IF_ERROR(writer->AppendMetadata(meta.ToRecord()));
  PTKIT_RETURN_IF_ERROR(writer->AppendSideband({-1, sb.bytes()}));
  for (const AuxRecord& r : aux) PTKIT_RETURN_IF_ERROR(writer->AppendAux(r));
  if (container.more_records) PTKIT_RETURN_IF_ERROR(container.more_records(*writer));
  return writer->Close();
}

}  // namespace ptkit::swpt
