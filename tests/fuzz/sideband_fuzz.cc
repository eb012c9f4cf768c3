// Fuzzes the perf record parsers (perf::RecordReader, Parse* for every kind the sideband uses,
// CheckRecordBody) and the sideband model (SidebandBuilder, the Sideband's queries).
//   u8 sample_type bits (TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER), u8 sample_id_all, then
//   batches: i32 cpu, u32 size, size bytes of perf_event_header-framed records (a size beyond
//   the input takes what is left).
// Checked beyond "no crash": a parsed record encodes to bytes that parse and encode the same;
// MappingsAt is sorted and free of overlaps, and FindMapping finds each of its mappings.
// Seeds: the sideband of the decode fuzzer's emulated recordings, and hand-made batches of
// every kind (tests/fuzz/corpus/sideband/).
#include <linux/perf_event.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <span>
#include <vector>

#include "ptkit/perf_records.h"
#include "ptkit/sideband.h"

namespace {

namespace perf = ::ptkit::perf;

void Check(bool ok) {
  if (!ok) std::abort();
}

// Encode(Parse(bytes)) parses again, and encodes to the same bytes.
template <typename Parse, typename Encode>
void RoundTrip(const perf::RecordView& r, const perf::SampleIdLayout& layout, Parse parse,
               Encode encode) {
  auto first = parse(r, layout);
  if (!first.ok()) return;
  const std::vector<uint8_t> once = encode(*first, layout);
  auto view = perf::ReadRecord(once);
  Check(view.ok());
  auto second = parse(*view, layout);
  Check(second.ok());
  Check(encode(*second, layout) == once);
}

void ParseEach(std::span<const uint8_t> records, const perf::SampleIdLayout& layout) {
  perf::RecordReader reader(records);
  for (;;) {
    auto next = reader.Next();
    if (!next.ok() || !next->has_value()) return;
    const perf::RecordView& r = **next;
    (void)perf::ParseSampleId(r, layout);
    (void)ptkit::CheckRecordBody(r, layout);
    switch (r.type) {
      case PERF_RECORD_MMAP2:
        RoundTrip(r, layout, perf::ParseMmap2, perf::EncodeMmap2);
        break;
      case PERF_RECORD_COMM:
        RoundTrip(r, layout, perf::ParseComm, perf::EncodeComm);
        break;
      case PERF_RECORD_FORK:
      case PERF_RECORD_EXIT:
        RoundTrip(r, layout, perf::ParseTask, perf::EncodeTask);
        break;
      case PERF_RECORD_AUX:
        RoundTrip(r, layout, perf::ParseAux, perf::EncodeAux);
        break;
      case PERF_RECORD_ITRACE_START:
        RoundTrip(r, layout, perf::ParseItraceStart, perf::EncodeItraceStart);
        break;
      case PERF_RECORD_LOST:
        RoundTrip(r, layout, perf::ParseLost, perf::EncodeLost);
        break;
      case PERF_RECORD_SWITCH:
      case PERF_RECORD_SWITCH_CPU_WIDE:
        RoundTrip(r, layout, perf::ParseSwitch, perf::EncodeSwitch);
        break;
      default:
        break;
    }
  }
}

// The model's answers at `t` for `pid`: sorted, disjoint mappings, each found by address.
void Query(const ptkit::Sideband& s, uint32_t pid, uint64_t t) {
  const std::vector<const ptkit::Mapping*> maps = s.MappingsAt(pid, t);
  for (size_t i = 0; i < maps.size(); ++i) {
    const ptkit::Mapping& m = *maps[i];
    Check(m.start < m.end);
    if (i > 0) Check(maps[i - 1]->end <= m.start);
    Check(s.FindMapping(pid, m.start, t) == &m);
    Check(s.FindMapping(pid, m.end - 1, t) == &m);
  }
  (void)s.EpochAt(pid, t);
  (void)s.CommAt(pid, t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static constexpr uint64_t kBits[] = {PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
                                       PERF_SAMPLE_ID,  PERF_SAMPLE_STREAM_ID,
                                       PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER};
  perf::SampleIdLayout layout{0, (data[1] & 1) != 0};
  for (size_t i = 0; i < std::size(kBits); ++i) {
    if (data[0] & (1u << i)) layout.sample_type |= kBits[i];
  }
  ptkit::SidebandBuilder builder(layout);
  std::vector<int32_t> cpus;
  std::vector<uint64_t> times = {0, 1, ptkit::kForever};
  for (size_t at = 2; at + 8 <= size;) {
    int32_t cpu;
    uint32_t n;
    std::memcpy(&cpu, data + at, 4);
    std::memcpy(&n, data + at + 4, 4);
    at += 8;
    const std::span<const uint8_t> batch(data + at, std::min<size_t>(n, size - at));
    at += batch.size();
    ParseEach(batch, layout);
    builder.Add(cpu, batch);
    if (cpu >= 0) cpus.push_back(cpu);
    // Times the records name, to ask the model about.
    perf::RecordReader reader(batch);
    for (auto r = reader.Next(); r.ok() && r->has_value() && times.size() < 64; r = reader.Next()) {
      if (auto id = perf::ParseSampleId(**r, layout); id.ok() && id->has_time) {
        times.push_back(id->time);
        times.push_back(id->time - 1);
      }
    }
  }
  const ptkit::Sideband s = builder.Build();
  (void)s.stats();
  for (uint32_t pid : s.Pids()) {
    for (uint64_t t : times) Query(s, pid, t);
    const std::vector<uint64_t>& execs = s.ExecTimes(pid);
    for (size_t i = 1; i < execs.size(); ++i) Check(execs[i - 1] <= execs[i]);
    for (const ptkit::Mapping* m : s.MappingsDuring(pid)) Check(m != nullptr && m->start < m->end);
    (void)s.PidOfTid(pid);
  }
  for (int32_t cpu : cpus) {
    for (uint64_t t : times) (void)s.TaskOnCpu(static_cast<uint32_t>(cpu), t);
  }
  return 0;
}
