// The perf.data layout constants that the reader (ptkit/perf_data.h), the writer
// (ptkit/perf_data_writer.h) and the decoder's import and export of perf.data share, as
// tools/perf/Documentation/perf.data-file-format.txt and perf's sources define them.
#ifndef PTKIT_PERF_DATA_FORMAT_H_
#define PTKIT_PERF_DATA_FORMAT_H_

#include <linux/perf_event.h>

#include <cstddef>
#include <cstdint>

namespace ptkit::perf {

// The first 8 bytes of a perf.data (file or pipe mode), and of one of the other byte order.
inline constexpr char kMagic[8] = {'P', 'E', 'R', 'F', 'I', 'L', 'E', '2'};
inline constexpr char kMagicSwapped[8] = {'2', 'E', 'L', 'I', 'F', 'R', 'E', 'P'};
inline constexpr uint64_t kPipeHeaderSize = 16;        // struct perf_pipe_file_header + magic
inline constexpr uint64_t kFileHeaderSize = 104;       // struct perf_file_header
inline constexpr uint64_t kFileSectionSize = 16;       // struct perf_file_section {offset, size}
inline constexpr size_t kNameAlign = 64;               // NAME_ALIGN in tools/perf/util/header.c
inline constexpr uint16_t kBuildIdSizeMisc = 1 << 15;  // PERF_RECORD_MISC_BUILD_ID_SIZE

// PERF_RECORD_AUXTRACE: the header, then size, offset, reference, idx, tid, cpu, reserved.
inline constexpr uint16_t kAuxtraceRecordSize = sizeof(perf_event_header) + 40;

// The cpu or tid -1 of perf's records (an AUXTRACE of a per-thread recording, ID_INDEX).
inline constexpr uint32_t kNoCpu = 0xffffffff;

// PERF_RECORD_AUXTRACE_INFO types (tools/perf/util/auxtrace.h, enum auxtrace_type).
inline constexpr uint32_t kAuxtraceIntelPt = 1;
inline constexpr uint32_t kAuxtraceIntelBts = 2;

}  // namespace ptkit::perf

#endif  // PTKIT_PERF_DATA_FORMAT_H_
