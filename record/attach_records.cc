#include "record/attach_records.h"

#include <sys/mman.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ptkit/elf_file.h"
#include "ptkit/status.h"
#include "record/perf_event.h"
#include "record/proc_maps.h"
#include "record/text_util.h"

namespace ptkit::record {

absl::StatusOr<std::vector<uint8_t>> SynthesizeProcessRecords(pid_t pid,
                                                              std::span<const pid_t> tids,
                                                              const perf::SampleIdLayout& layout) {
  PTKIT_ASSIGN_OR_RETURN(std::vector<ProcMapping> maps, ReadProcMaps(absl::StrCat(pid)));
  std::vector<uint8_t> out;
  auto append = [&out](const std::vector<uint8_t>& record) {
    out.insert(out.end(), record.begin(), record.end());
  };
  perf::SampleId id;
  id.has_tid = id.has_time = id.has_cpu = id.has_id = true;
  id.pid = static_cast<uint32_t>(pid);
  id.cpu = ~0u;
  for (const pid_t tid : tids) {
    absl::StatusOr<std::string> name =
        ReadSystemFile(absl::StrCat("/proc/", pid, "/task/", tid, "/comm"));
    if (!name.ok()) continue;  // the thread has exited
    perf::Comm comm;
    comm.pid = id.pid;
    comm.tid = static_cast<uint32_t>(tid);
    const std::string_view text = Strip(*name);
    comm.comm = text;
    comm.sample_id = id;
    comm.sample_id.tid = comm.tid;
    append(perf::EncodeComm(comm, layout));
  }
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> build_ids;  // (dev, inode)
  for (const ProcMapping& m : maps) {
    if (!(m.prot & PROT_EXEC) || m.path == "[vsyscall]") continue;
    perf::Mmap2 mmap;
    mmap.pid = mmap.tid = id.pid;
    mmap.addr = m.start;
    mmap.len = m.end - m.start;
    mmap.pgoff = m.offset;
    mmap.maj = m.dev_major;
    mmap.min = m.dev_minor;
    mmap.ino = m.inode;
    // The build-id of the file the process mapped, read through /proc/PID/map_files (the
    // file itself, in whatever mount namespace the process runs: a container's path may name
    // another file here, sweep 37c H2), as the kernel's MMAP2 records carry it.
    std::vector<uint8_t> build_id;
    if (m.inode != 0) {
      const std::pair<uint32_t, uint64_t> file{m.dev_major << 20 | m.dev_minor, m.inode};
      auto [known, first] = build_ids.try_emplace(file);
      if (first) {
        absl::StatusOr<std::vector<uint8_t>> id = ReadBuildId(
            absl::StrCat("/proc/", pid, "/map_files/", absl::Hex(m.start), "-", absl::Hex(m.end)));
        if (id.ok()) known->second = *std::move(id);
      }
      build_id = known->second;
    }
    mmap.build_id = build_id;
    mmap.prot = static_cast<uint32_t>(m.prot);
    mmap.flags = m.shared ? MAP_SHARED : MAP_PRIVATE;
    mmap.filename = m.path.empty() ? std::string_view("//anon") : std::string_view(m.path);
    mmap.sample_id = id;
    mmap.sample_id.tid = id.pid;
    append(perf::EncodeMmap2(mmap, layout));
  }
  return out;
}

}  // namespace ptkit::record
