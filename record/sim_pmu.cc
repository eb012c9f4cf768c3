#include "record/sim_pmu.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "ptkit/status.h"
#include "record/text_util.h"

namespace ptkit::record {

absl::StatusOr<std::unique_ptr<SimulatedPmu>> SimulatedPmu::Create(const SimOptions& options) {
  if (!IsPowerOfTwo(options.data_pages) || !IsPowerOfTwo(options.aux_pages) ||
      !IsPowerOfTwo(options.page_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("simulated PMU: data pages (", options.data_pages, "), AUX pages (",
                     options.aux_pages, ") and page size must be powers of two"));
  }
  std::unique_ptr<SimulatedPmu> sim(new SimulatedPmu(options));
  const uint64_t page = options.page_size;
  const size_t len = (1 + options.data_pages + options.aux_pages) * page;
  sim->mapping_ = ScopedMmap(
      mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), len);
  if (!sim->mapping_.valid()) return ErrnoStatus(errno, "mmap simulated PMU (", len, " bytes)");
  uint8_t* const base = static_cast<uint8_t*>(sim->mapping_.get());
  sim->event_fd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!sim->event_fd_.valid()) return ErrnoStatus(errno, "eventfd for simulated PMU");

  // The same user-page fields the kernel fills (perf_mmap(), rb_alloc_aux()); aux_* are set
  // here the way a reader sets them before mapping the AUX area.
  auto* up = reinterpret_cast<perf_event_mmap_page*>(base);
  up->version = 0;
  up->compat_version = 0;
  up->data_offset = page;
  up->data_size = options.data_pages * page;
  up->aux_offset = up->data_offset + up->data_size;
  up->aux_size = options.aux_pages * page;
  sim->view_.page = up;
  sim->view_.data = std::span<uint8_t>(base + up->data_offset, up->data_size);
  sim->view_.aux = std::span<uint8_t>(base + up->aux_offset, up->aux_size);
  sim->view_.aux_overwrite = options.overwrite;
  sim->view_.aux_head_in_buffer = options.overwrite && options.masked_overwrite_head;
  {
    absl::MutexLock lock(&sim->mu_);
    sim->enabled_ = options.start_enabled;
  }
  return sim;
}

SimulatedPmu::SimulatedPmu(const SimOptions& options) : options_(options) {}

void SimulatedPmu::ClearWakeup() {
  uint64_t v;
  while (read(event_fd_.get(), &v, sizeof(v)) == sizeof(v)) {
  }
}

void SimulatedPmu::Wake() {
  const uint64_t one = 1;
  (void)!write(event_fd_.get(), &one, sizeof(one));
  ++stats_.wakeups;
}

perf::SampleId SimulatedPmu::NextSampleId() {
  perf::SampleId s;
  s.has_tid = s.has_time = s.has_cpu = s.has_id = true;
  s.pid = options_.pid;
  s.tid = options_.tid;
  time_ = options_.clock != nullptr ? std::max(options_.clock(), time_) : time_ + 1;
  s.time = time_;
  s.cpu = static_cast<uint32_t>(options_.cpu);
  s.id = options_.id;
  return s;
}

// kernel/events/ring_buffer.c __perf_output_begin(): a pending lost count is written as a
// PERF_RECORD_LOST in front of the next record, and the space check covers both; a record
// that does not fit is dropped and counted (local_inc(&rb->lost)).
bool SimulatedPmu::WriteRecordLocked(std::span<const uint8_t> record) {
  std::vector<uint8_t> lost;
  if (pending_lost_ > 0) {
    lost = perf::EncodeLost(
        perf::Lost{.id = options_.id, .lost = pending_lost_, .sample_id = NextSampleId()},
        options_.layout);
  }
  const uint64_t size = view_.data.size();
  const uint64_t tail = LoadDataTail(view_.page);
  const uint64_t need = lost.size() + record.size();
  if (need > size - (data_head_ - tail)) {
    ++pending_lost_;
    ++stats_.records_lost;
    return false;
  }
  if (!lost.empty()) {
    CopyToRing(view_.data, data_head_, lost);
    data_head_ += lost.size();
    ++stats_.lost_records;
    pending_lost_ = 0;
  }
  CopyToRing(view_.data, data_head_, record);
  data_head_ += record.size();
  // perf_output_put_handle(): smp_wmb() then publish the head.
  StoreDataHead(view_.page, data_head_);
  Wake();
  return true;
}

bool SimulatedPmu::WriteRecord(std::span<const uint8_t> record) {
  absl::MutexLock lock(&mu_);
  return WriteRecordLocked(record);
}

uint64_t SimulatedPmu::WriteSample(const perf::Sample& sample, uint64_t sample_type,
                                   uint64_t aux_sample_size) {
  absl::MutexLock lock(&mu_);
  perf::Sample s = sample;
  s.aux = {};
  const uint64_t header = perf::EncodeSample(s, sample_type).size();
  uint64_t size = std::min<uint64_t>(aux_sample_size, 0xffff - std::min<uint64_t>(header, 0xffff));
  size = std::min<uint64_t>(size & ~uint64_t{7}, view_.aux.size());
  std::vector<uint8_t> aux(size);
  CopyFromRing(view_.aux, aux_head_ - size, aux);
  s.aux = aux;
  if (!WriteRecordLocked(perf::EncodeSample(s, sample_type))) return 0;
  ++stats_.samples;
  stats_.sample_aux_bytes += size;
  return size;
}

bool SimulatedPmu::WriteItraceStart(uint32_t pid, uint32_t tid) {
  absl::MutexLock lock(&mu_);
  return WriteRecordLocked(perf::EncodeItraceStart(
      perf::ItraceStart{.pid = pid, .tid = tid, .sample_id = NextSampleId()}, options_.layout));
}

bool SimulatedPmu::WriteTextPoke(uint64_t addr, std::span<const uint8_t> bytes) {
  absl::MutexLock lock(&mu_);
  return WriteRecordLocked(perf::EncodeTextPoke(
      perf::TextPoke{.addr = addr, .new_bytes = bytes, .sample_id = NextSampleId()},
      options_.layout));
}

// perf_aux_output_end(): in full-trace mode the record names the new bytes [offset, +size);
// in overwrite mode aux_offset is the new head (kernel: perf_event_aux_event(event,
// aux_head, size, flags) with aux_head = handle->head) and, with an in-buffer head, size is
// the whole buffer (pt_event_stop(), bts_event_stop()). The record is written, then
// aux_head published.
void SimulatedPmu::EmitAux(uint64_t offset, uint64_t size, uint64_t flags) {
  const bool masked = options_.overwrite && options_.masked_overwrite_head;
  if (masked) {
    offset &= view_.aux.size() - 1;
    size = view_.aux.size();
  }
  const std::vector<uint8_t> rec = perf::EncodeAux(
      perf::Aux{
          .aux_offset = offset, .aux_size = size, .flags = flags, .sample_id = NextSampleId()},
      options_.layout);
  WriteRecordLocked(rec);
  StoreAuxHead(view_.page, masked ? aux_head_ & (view_.aux.size() - 1) : aux_head_);
  ++stats_.aux_records;
  if (flags & PERF_AUX_FLAG_TRUNCATED) ++stats_.truncations;
  aux_reported_ = aux_head_;
}

uint64_t SimulatedPmu::WriteTrace(std::span<const uint8_t> bytes) {
  absl::MutexLock lock(&mu_);
  if (!enabled_) {
    stats_.aux_dropped += bytes.size();
    return 0;
  }
  const uint64_t size = view_.aux.size();
  if (options_.overwrite) {
    // The hardware wraps freely. Only the last `size` bytes can survive.
    const std::span<const uint8_t> tail =
        bytes.size() > size ? bytes.subspan(bytes.size() - size) : bytes;
    CopyToRing(view_.aux, aux_head_ + (bytes.size() - tail.size()), tail);
    aux_head_ += bytes.size();
    stats_.aux_written += bytes.size();
    return bytes.size();
  }
  const uint64_t watermark = options_.aux_watermark ? options_.aux_watermark : size / 2;
  uint64_t done = 0;
  while (done < bytes.size()) {
    const uint64_t free = size - (aux_head_ - LoadAuxTail(view_.page));
    if (free == 0) {
      // Buffer full: the PMI reports what was written with TRUNCATED and the event stops
      // until the reader re-enables it; the rest of this burst is lost.
      EmitAux(aux_reported_, aux_head_ - aux_reported_, PERF_AUX_FLAG_TRUNCATED);
      enabled_ = false;
      stats_.aux_dropped += bytes.size() - done;
      break;
    }
    const uint64_t to_mark = watermark - (aux_head_ - aux_reported_);
    const uint64_t n = std::min({bytes.size() - done, free, to_mark});
    CopyToRing(view_.aux, aux_head_, bytes.subspan(done, n));
    aux_head_ += n;
    done += n;
    stats_.aux_written += n;
    if (aux_head_ - aux_reported_ >= watermark) EmitAux(aux_reported_, watermark, 0);
  }
  return done;
}

void SimulatedPmu::EndTransaction() {
  absl::MutexLock lock(&mu_);
  if (options_.overwrite) {
    if (aux_head_ != aux_reported_) {
      EmitAux(aux_head_, aux_head_ - aux_reported_, PERF_AUX_FLAG_OVERWRITE);
    }
  } else if (aux_head_ != aux_reported_) {
    EmitAux(aux_reported_, aux_head_ - aux_reported_, 0);
  }
}

absl::Status SimulatedPmu::Enable() {
  absl::MutexLock lock(&mu_);
  enabled_ = true;
  return absl::OkStatus();
}

absl::Status SimulatedPmu::Disable() {
  {
    absl::MutexLock lock(&mu_);
    enabled_ = false;
  }
  // pt_event_stop() -> perf_aux_output_end(): the transaction ends with the data so far.
  EndTransaction();
  return absl::OkStatus();
}

bool SimulatedPmu::enabled() const {
  absl::MutexLock lock(&mu_);
  return enabled_;
}

SimStats SimulatedPmu::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace ptkit::record
