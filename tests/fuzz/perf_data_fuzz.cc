// Fuzzes the perf.data reader and the perf record parsers with arbitrary files. The reader must
// never crash, never allocate from an unchecked length, and keep only whole records.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "ptkit/perf_data.h"
#include "ptkit/perf_records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto src = ptkit::MemorySource(std::span<const uint8_t>(data, size), "fuzz.data");
  auto d = ptkit::perf::ReadPerfData(*src);
  if (!d.ok()) return 0;
  uint64_t file_bytes = 0;
  for (size_t i = 0; i < d->records.size(); ++i) {
    const ptkit::perf::PerfRecordRef& ref = d->records[i];
    if (!ref.in_compressed) {
      file_bytes += ref.size;
      if (ref.offset + ref.size > size) std::abort();  // a record past the end
    }
    ptkit::perf::RecordView r = d->View(i);
    const ptkit::perf::PerfAttr* attr = d->AttrOf(r);
    const ptkit::perf::SampleIdLayout layout =
        attr ? attr->layout() : ptkit::perf::SampleIdLayout{0, false};
    switch (r.type) {
      case PERF_RECORD_MMAP2:
        (void)ptkit::perf::ParseMmap2(r, layout);
        break;
      case PERF_RECORD_COMM:
        (void)ptkit::perf::ParseComm(r, layout);
        break;
      case PERF_RECORD_FORK:
      case PERF_RECORD_EXIT:
        (void)ptkit::perf::ParseTask(r, layout);
        break;
      case PERF_RECORD_AUX:
        (void)ptkit::perf::ParseAux(r, layout);
        break;
      case PERF_RECORD_ITRACE_START:
        (void)ptkit::perf::ParseItraceStart(r, layout);
        break;
      case PERF_RECORD_LOST:
        (void)ptkit::perf::ParseLost(r, layout);
        break;
      case PERF_RECORD_SWITCH:
      case PERF_RECORD_SWITCH_CPU_WIDE:
        (void)ptkit::perf::ParseSwitch(r, layout);
        break;
      default:
        break;
    }
  }
  uint64_t trace_bytes = 0;
  for (const ptkit::perf::Auxtrace& a : d->auxtrace) {
    if (a.available > a.size || a.data_offset + a.available > size) std::abort();
    trace_bytes += a.available;
    auto bytes = ptkit::perf::ReadAuxtraceData(*src, a);
    if (!bytes.ok() || bytes->size() != a.available) std::abort();
  }
  // Records and trace bytes are disjoint stretches of the file.
  if (file_bytes + trace_bytes > size) std::abort();
  return 0;
}
