#include "record/ring_buffer.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ptkit/numbers.h"
#include "ptkit/status.h"
#include "record/text_util.h"

namespace ptkit::record {
namespace {

uint64_t TotalPages(MmapPages p, uint64_t events) {
  // perf_mmap() charges 1 + data pages for the base mapping and aux pages for the AUX area.
  return events * (1 + p.data_pages + p.aux_pages);
}

bool Fits(const MlockLimits& l, MmapPages p, uint64_t events) {
  const uint64_t user_pages = l.perf_event_mlock_kb * 1024 / l.page_size * l.online_cpus;
  const uint64_t rlimit_pages =
      l.rlimit_memlock == RLIM_INFINITY ? UINT64_MAX / 2 : l.rlimit_memlock / l.page_size;
  return TotalPages(p, events) <= user_pages + rlimit_pages;
}

}  // namespace

MlockLimits ReadMlockLimits(const FileReader& read_file) {
  MlockLimits l;
  if (read_file) {
    absl::StatusOr<std::string> kb = read_file("/proc/sys/kernel/perf_event_mlock_kb");
    uint64_t v = 0;
    if (kb.ok() && ParseUnsigned(Strip(*kb), &v)) l.perf_event_mlock_kb = v;
  }
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) l.rlimit_memlock = rl.rlim_cur;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 0) l.online_cpus = static_cast<uint64_t>(cpus);
  const long page = sysconf(_SC_PAGESIZE);
  if (page > 0) l.page_size = static_cast<uint64_t>(page);
  return l;
}

MmapPages LargestFittingPages(const MlockLimits& limits, MmapPages asked, uint64_t events) {
  MmapPages p = asked;
  while (!Fits(limits, p, events)) {
    if (p.aux_pages > 1 && p.aux_pages >= p.data_pages) {
      p.aux_pages /= 2;
    } else if (p.data_pages > 1) {
      p.data_pages /= 2;
    } else {  // data_pages <= 1: aux_pages > 1 would have taken the first branch
      return MmapPages{};
    }
  }
  return p;
}

absl::Status MmapPermissionError(std::string_view what, const MlockLimits& limits, MmapPages asked,
                                 uint64_t events) {
  const uint64_t bytes = TotalPages(asked, events) * limits.page_size;
  const MmapPages fit = LargestFittingPages(limits, asked, events);
  const std::string rlimit = limits.rlimit_memlock == RLIM_INFINITY
                                 ? std::string("unlimited")
                                 : absl::StrCat(limits.rlimit_memlock / 1024, " KiB");
  std::string hint = fit.data_pages == 0
                         ? std::string("no -m fits; raise the limits or run as root (CAP_IPC_LOCK)")
                         : (fit.aux_pages > 0 ? absl::StrCat("-m ", fit.data_pages, ",",
                                                             fit.aux_pages, " would fit")
                                              : absl::StrCat("-m ", fit.data_pages, " would fit"));
  return absl::PermissionDeniedError(absl::StrCat(
      "mmap ", std::string(what), ": Operation not permitted: ", events, " mapping(s) of -m ",
      asked.data_pages, ",", asked.aux_pages, " lock ", bytes, " bytes, more than ",
      "kernel.perf_event_mlock_kb (", limits.perf_event_mlock_kb, " KiB per CPU x ",
      limits.online_cpus, " CPUs) + RLIMIT_MEMLOCK (", rlimit, ") allow; ", hint,
      ", or raise `ulimit -l` / sysctl kernel.perf_event_mlock_kb"));
}

absl::StatusOr<RingBuffer> RingBuffer::Map(const PerfEvent& event, uint64_t data_pages,
                                           uint64_t aux_pages, bool aux_overwrite, uint64_t events,
                                           const MlockLimits& limits) {
  if (!IsPowerOfTwo(data_pages)) {
    return absl::InvalidArgumentError(absl::StrCat("data ring of ", event.name(), ": ", data_pages,
                                                   " pages is not a power of two"));
  }
  if (aux_pages != 0 && !IsPowerOfTwo(aux_pages)) {
    return absl::InvalidArgumentError(absl::StrCat("AUX area of ", event.name(), ": ", aux_pages,
                                                   " pages is not a power of two"));
  }
  if (data_pages > kMaxMmapPages || aux_pages > kMaxMmapPages) {
    return absl::InvalidArgumentError(absl::StrCat("mmap of ", event.name(), ": ", data_pages,
                                                   " data and ", aux_pages, " AUX pages; at most ",
                                                   kMaxMmapPages, " pages each"));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const MmapPages asked{data_pages, aux_pages};
  RingBuffer rb;
  const size_t base_len = (1 + data_pages) * page;
  rb.base_ = ScopedMmap(mmap(nullptr, base_len, PROT_READ | PROT_WRITE, MAP_SHARED, event.fd(), 0),
                        base_len);
  if (!rb.base_.valid()) {
    const std::string what = absl::StrCat("data ring of ", event.name());
    if (errno == EPERM) return MmapPermissionError(what, limits, asked, events);
    if (errno == EINVAL && event.attr().inherit && event.cpu() == -1) {
      // perf_mmap(): "Don't allow mmap() of inherited per-task counters."
      return absl::InvalidArgumentError(
          absl::StrCat("mmap ", what,
                       ": the kernel does not map inherited per-task events; open one "
                       "event per CPU (pid, cpu) instead"));
    }
    return ErrnoStatus(errno, "mmap ", what, " (", base_len, " bytes)");
  }
  uint8_t* const base = static_cast<uint8_t*>(rb.base_.get());
  rb.view_.page = reinterpret_cast<perf_event_mmap_page*>(base);
  // The kernel fills data_offset/data_size (since 4.1); older kernels put the data right
  // after the user page.
  const uint64_t data_offset = rb.view_.page->data_offset ? rb.view_.page->data_offset : page;
  const uint64_t data_size =
      rb.view_.page->data_size ? rb.view_.page->data_size : data_pages * page;
  rb.view_.data = std::span<uint8_t>(base + data_offset, data_size);

  if (aux_pages > 0) {
    // <linux/perf_event.h>: aux_offset >= data_offset + data_size, page aligned; set both in
    // the user page, then mmap the same range. PROT_WRITE selects full-trace mode (the
    // kernel never overwrites unread data); read-only selects overwrite mode
    // (rb->overwrite = !(vma->vm_flags & VM_WRITE) in perf_mmap()).
    rb.view_.page->aux_offset = data_offset + data_size;
    rb.view_.page->aux_size = aux_pages * page;
    const size_t aux_len = aux_pages * page;
    const int prot = aux_overwrite ? PROT_READ : PROT_READ | PROT_WRITE;
    rb.aux_ = ScopedMmap(mmap(nullptr, aux_len, prot, MAP_SHARED, event.fd(),
                              static_cast<off_t>(rb.view_.page->aux_offset)),
                         aux_len);
    if (!rb.aux_.valid()) {
      const int err = errno;
      const std::string what = absl::StrCat("AUX area of ", event.name());
      if (err == EPERM) return MmapPermissionError(what, limits, asked, events);
      if (err == EOPNOTSUPP) {
        return absl::UnimplementedError(
            absl::StrCat("mmap ", what, ": the event's PMU has no AUX area"));
      }
      return ErrnoStatus(err, "mmap ", what, " (", aux_len, " bytes)");
    }
    rb.view_.aux = std::span<uint8_t>(static_cast<uint8_t*>(rb.aux_.get()), aux_len);
    rb.view_.aux_overwrite = aux_overwrite;
    rb.view_.aux_head_in_buffer = aux_overwrite;
  }
  return rb;
}

RingBuffer& RingBuffer::operator=(RingBuffer&& other) noexcept {
  if (this != &other) {
    // AUX before the base, as perf does (auxtrace_mmap__munmap before perf_mmap__munmap);
    // the destructor keeps the same order (aux_ is declared after base_).
    aux_ = std::move(other.aux_);
    base_ = std::move(other.base_);
    view_ = std::exchange(other.view_, RingView{});
  }
  return *this;
}

}  // namespace ptkit::record
