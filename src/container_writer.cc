#include "ptkit/container_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"
#include "ptkit/usable_cpus.h"

namespace ptkit {
namespace {

// Writes end on a multiple of this in the file (but for a flush). The page cache gives a write
// folios as large as its length and file offset allow: 64 KiB writes at 64 KiB boundaries ran
// at 1.55 GB/s here, the same writes one page off at 1.11 GB/s, and page-aligned 64 KiB records
// with their headers (what this writer did before) at 1.17 GB/s (kernel 6.18, ext4).
constexpr uint64_t kWriteAlign = uint64_t{64} << 10;
// Payloads smaller than this are stored as they are: zstd cannot win much on them.
constexpr size_t kMinCompressSize = 128;
// Payload buffers kept for reuse after they are written.
constexpr size_t kPoolBuffers = 16;
// With a compression helper, records are compressed in chunks of this many (the helper takes
// every other one), then written in order.
constexpr size_t kChunkItems = 8;

struct Item {
  uint16_t type;
  std::vector<uint8_t> payload;
};

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};

// Compresses `payload` into `out` (kept at least at the bound, so it never refills) and
// returns the compressed size, or 0 when compression does not save at least 1/16 of the bytes.
size_t Compress(ZSTD_CCtx* cctx, std::span<const uint8_t> payload, std::vector<uint8_t>& out) {
  if (payload.size() < kMinCompressSize) return 0;
  const size_t bound = ZSTD_compressBound(payload.size());
  if (out.size() < bound) out.resize(bound);
  size_t n = ZSTD_compress2(cctx, out.data(), out.size(), payload.data(), payload.size());
  return !ZSTD_isError(n) && n < payload.size() - payload.size() / 16 ? n : 0;
}

// Writes all of `iov` with writev, resuming after partial writes and EINTR. `written` counts
// the bytes that reached the file, also when it fails.
absl::Status WriteAll(int fd, iovec* iov, int iovcnt, const std::string& name, uint64_t& written) {
  while (iovcnt > 0) {
    ssize_t n = ::writev(fd, iov, iovcnt);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "write ", name);
    }
    written += static_cast<uint64_t>(n);
    size_t left = static_cast<size_t>(n);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct ContainerWriter::State {
  ScopedFd fd;
  std::string name;
  // The file Create() made, until Publish(): `name`, or (replaces) a new one beside it.
  std::string created;
  bool replaces = false;
  WriterOptions options;

  // Shared between producers and the writer thread.
  absl::Mutex mu;
  std::deque<Item> queue ABSL_GUARDED_BY(mu);
  size_t queued_bytes ABSL_GUARDED_BY(mu) = 0;
  uint64_t enqueued ABSL_GUARDED_BY(mu) = 0;  // records ever queued
  uint64_t flushed ABSL_GUARDED_BY(mu) = 0;   // records handed to write(2)
  bool flush_requested ABSL_GUARDED_BY(mu) = false;
  bool closing ABSL_GUARDED_BY(mu) = false;
  bool abandon ABSL_GUARDED_BY(mu) = false;  // close without the footer
  bool closed ABSL_GUARDED_BY(mu) = false;
  absl::Status error ABSL_GUARDED_BY(mu);
  WriterStats stats ABSL_GUARDED_BY(mu);
  std::vector<std::vector<uint8_t>> pool ABSL_GUARDED_BY(mu);

  // Owned by the writer thread.
  std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx;
  std::vector<uint8_t> zbufs[kChunkItems];  // a chunk's compressed records
  size_t zsizes[kChunkItems] = {};
  // Records framed but not written yet: header and stored bytes, in file order. They point into
  // `headers`, the chunk's items and `zbufs`, so they are written (or copied into `buffer`)
  // before those are reused.
  std::vector<std::span<const uint8_t>> parts;
  uint64_t parts_bytes = 0;
  uint8_t headers[kChunkItems][kFrameHeaderSize] = {};
  size_t header_count = 0;

  // The compression helper: compresses the records `helper_job` names into zbufs/zsizes.
  std::unique_ptr<ZSTD_CCtx, CCtxDeleter> helper_cctx;
  std::thread helper;
  absl::Mutex hmu;
  std::vector<std::pair<size_t, std::span<const uint8_t>>> helper_job ABSL_GUARDED_BY(hmu);
  bool helper_busy ABSL_GUARDED_BY(hmu) = false;
  bool helper_stop ABSL_GUARDED_BY(hmu) = false;
  std::vector<uint8_t> buffer;  // bytes after file_size, less than kWriteAlign but after a flush
  uint64_t sequence = 0;
  uint64_t processed = 0;            // records placed in `buffer` or written
  uint64_t file_size = 0;            // bytes successfully written
  uint64_t whole_size = 0;           // the end of the last record that is wholly in the file
  std::deque<uint64_t> record_ends;  // ends (file offsets) of records not wholly written yet
  absl::Time last_flush;
  std::map<uint16_t, FooterRecord::Kind> kinds;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  bool footer_written = false;

  std::thread thread;

  absl::Status FlushBuffer();
  // Writes `buffer` and `parts` up to the last multiple of kWriteAlign they reach in the file
  // (everything with `all`) and keeps the rest in `buffer`.
  absl::Status WriteOut(bool all);
  // Frames a record whose payload (`raw_size` bytes) is stored as `stored` (zstd-compressed when
  // `zstd`) into `parts`.
  void Frame(uint16_t type, size_t raw_size, std::span<const uint8_t> stored, bool zstd);
  void UpdateStats() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Writes a chunk of records (at most kChunkItems), compressed by this thread and, when there
  // is one, the helper.
  absl::Status WriteChunk(std::span<Item> items);
  void RunHelper();
  absl::Status WriteFooter();
  void Run();
  void Fail(const absl::Status& s);
};

void ContainerWriter::State::Fail(const absl::Status& s) {
  // Keep the file readable: cut it back to the last whole record written.
  if (::ftruncate(fd.get(), static_cast<off_t>(whole_size)) != 0) {
    // Nothing more to do: the reader treats a cut tail as loss it reports.
  }
  buffer.clear();
  parts.clear();
  parts_bytes = 0;
  header_count = 0;
  absl::MutexLock lock(&mu);
  if (error.ok()) error = s;
}

absl::Status ContainerWriter::State::FlushBuffer() {
  last_flush = absl::Now();
  return WriteOut(/*all=*/true);
}

absl::Status ContainerWriter::State::WriteOut(bool all) {
  const uint64_t end = file_size + buffer.size() + parts_bytes;
  const uint64_t target = all ? end : end / kWriteAlign * kWriteAlign;
  size_t first_kept = 0;  // the first part not wholly written
  size_t kept_from = 0;   // and where in it the rest starts
  if (target > file_size) {
    iovec iov[2 * kChunkItems + 1];
    int count = 0;
    uint64_t left = target - file_size;
    if (!buffer.empty()) iov[count++] = {buffer.data(), buffer.size()};
    left -= buffer.size();  // the buffer alone never reaches a boundary: target is past it
    for (; first_kept < parts.size() && left > 0; ++first_kept) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, parts[first_kept].size()));
      iov[count++] = {const_cast<uint8_t*>(parts[first_kept].data()), n};
      left -= n;
      if (n < parts[first_kept].size()) {
        kept_from = n;
        break;
      }
    }
    uint64_t written = 0;
    const absl::Status status = WriteAll(fd.get(), iov, count, name, written);
    // Records that a failed write still completed are whole: Fail() keeps them.
    file_size += written;
    while (!record_ends.empty() && record_ends.front() <= file_size) {
      whole_size = record_ends.front();
      record_ends.pop_front();
    }
    PTKIT_RETURN_IF_ERROR(status);
    buffer.clear();
  }
  // What was not written stays, in order.
  for (size_t i = first_kept; i < parts.size(); ++i) {
    const auto rest = parts[i].subspan(i == first_kept ? kept_from : 0);
    buffer.insert(buffer.end(), rest.begin(), rest.end());
  }
  parts.clear();
  parts_bytes = 0;
  header_count = 0;
  return absl::OkStatus();
}

void ContainerWriter::State::RunHelper() {
  for (;;) {
    std::vector<std::pair<size_t, std::span<const uint8_t>>> job;
    {
      absl::MutexLock lock(&hmu);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(hmu) {
        return !helper_job.empty() || helper_stop;
      };
      hmu.Await(absl::Condition(&ready));
      if (helper_job.empty()) return;
      job.swap(helper_job);
    }
    for (const auto& [slot, payload] : job) {
      zsizes[slot] = Compress(helper_cctx.get(), payload, zbufs[slot]);
    }
    absl::MutexLock lock(&hmu);
    helper_busy = false;
  }
}

absl::Status ContainerWriter::State::WriteChunk(std::span<Item> items) {
  bool mine[kChunkItems];
  std::fill(std::begin(mine), std::end(mine), true);
  const bool helped = options.compress && helper_cctx != nullptr && items.size() > 1;
  if (helped) {
    // Split by bytes, not by count: records alternate between small (sideband) and large (AUX).
    size_t my_bytes = 0, helper_bytes = 0;
    absl::MutexLock lock(&hmu);
    for (size_t i = 0; i < items.size(); ++i) {
      const size_t n = items[i].payload.size();
      mine[i] = my_bytes <= helper_bytes;
      if (mine[i]) {
        my_bytes += n;
      } else {
        helper_bytes += n;
        helper_job.emplace_back(i, items[i].payload);
      }
    }
    helper_busy = !helper_job.empty();
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (mine[i])
      zsizes[i] = options.compress ? Compress(cctx.get(), items[i].payload, zbufs[i]) : 0;
  }
  if (helped) {
    absl::MutexLock lock(&hmu);
    auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(hmu) { return !helper_busy; };
    hmu.Await(absl::Condition(&done));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::span<const uint8_t> payload = items[i].payload;
    const bool z = zsizes[i] != 0;
    Frame(items[i].type, payload.size(),
          z ? std::span<const uint8_t>(zbufs[i].data(), zsizes[i]) : payload, z);
  }
  return WriteOut(/*all=*/false);
}

void ContainerWriter::State::Frame(uint16_t type, size_t raw_size, std::span<const uint8_t> stored,
                                   bool zstd) {
  FrameHeader h;
  h.type = type;
  h.sequence = sequence;
  h.raw_size = raw_size;
  if (zstd) h.flags |= kFrameZstd;
  h.stored_size = stored.size();
  h.checksum = XXH3_64bits(stored.data(), stored.size());
  std::span<uint8_t, kFrameHeaderSize> header = headers[header_count++];
  EncodeFrameHeader(h, header);
  parts.emplace_back(header);
  if (!stored.empty()) parts.push_back(stored);
  const size_t total = kFrameHeaderSize + stored.size();
  parts_bytes += total;
  record_ends.push_back(file_size + buffer.size() + parts_bytes);
  ++sequence;
  FooterRecord::Kind& k = kinds[type];
  k.type = type;
  ++k.count;
  k.raw_bytes += raw_size;
  raw_bytes += raw_size;
  stored_bytes += total;
}

void ContainerWriter::State::UpdateStats() {
  stats.records = sequence - (footer_written ? 1 : 0);
  stats.raw_bytes = raw_bytes;
  stats.stored_bytes = stored_bytes + kFileHeaderSize;
}

absl::Status ContainerWriter::State::WriteFooter() {
  FooterRecord f;
  f.records = sequence;
  for (const auto& [type, k] : kinds) f.kinds.push_back(k);
  Item footer{static_cast<uint16_t>(RecordType::kFooter), EncodeFooter(f)};
  PTKIT_RETURN_IF_ERROR(WriteChunk({&footer, 1}));
  return FlushBuffer();
}

void ContainerWriter::State::Run() {
  last_flush = absl::Now();
  for (;;) {
    std::deque<Item> batch;
    bool closing_now = false;
    bool flush_now = false;
    bool failed = false;
    bool abandon_now = false;
    {
      absl::MutexLock lock(&mu);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
        return !queue.empty() || closing || flush_requested;
      };
      mu.AwaitWithTimeout(absl::Condition(&ready), options.flush_interval);
      batch.swap(queue);
      closing_now = closing;
      abandon_now = abandon;
      flush_now = flush_requested || batch.empty();
      flush_requested = false;
      failed = !error.ok();
    }
    // After a write error nothing more is written: the caller has the error from every call.
    absl::Status status = failed ? absl::CancelledError("earlier write error") : absl::OkStatus();
    std::vector<Item> items(std::make_move_iterator(batch.begin()),
                            std::make_move_iterator(batch.end()));
    for (size_t i = 0; i < items.size(); i += kChunkItems) {
      std::span<Item> chunk(items.data() + i, std::min(kChunkItems, items.size() - i));
      if (status.ok()) status = WriteChunk(chunk);
      processed += chunk.size();
      // Room for producers as records are written, not after the whole batch: they fill the
      // queue while the file is written.
      absl::MutexLock lock(&mu);
      for (Item& item : chunk) {
        queued_bytes -= item.payload.size();
        if (pool.size() < kPoolBuffers) pool.push_back(std::move(item.payload));
      }
    }
    bool flush_due = flush_now || closing_now || absl::Now() - last_flush >= options.flush_interval;
    if (status.ok() && flush_due) {
      status = FlushBuffer();
    }
    if (status.ok() && closing_now && !abandon_now) {
      status = WriteFooter();
      footer_written = status.ok();
    }
    if (!status.ok() && !failed) Fail(status);
    {
      absl::MutexLock lock(&mu);
      if (buffer.empty()) flushed = processed;
      UpdateStats();
      if (closing_now) {
        if (fd.Close() != 0 && error.ok()) error = ErrnoStatus(errno, "close ", name);
        closed = true;
        return;
      }
    }
  }
}

ContainerWriter::ContainerWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}

ContainerWriter::~ContainerWriter() {
  if (state_->replaces) {
    Discard();  // (no-op once published)
  } else {
    Abandon().IgnoreError();
  }
}

absl::StatusOr<std::unique_ptr<ContainerWriter>> ContainerWriter::Create(
    const std::string& path, const WriterOptions& options) {
  struct stat st {};
  const bool target = ::stat(path.c_str(), &st) == 0;  // (through links: /dev/fd/N, a pipe)
  const bool exists = target || ::lstat(path.c_str(), &st) == 0;
  std::string temp;
  int fd = -1;
  if (target && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    // A device, a FIFO: written as it is (no file to overwrite), never created, replaced or
    // removed (sweep 31c F1: -o /dev/null needed --overwrite-existing, then a failed start
    // removed /dev/null).
    // A FIFO whose reader does not come within 2 s is refused (ENXIO): a blocking open waited
    // for one with SIGINT and SIGTERM held off, which only SIGKILL ended (sweep 38b M5); a
    // reader started beside ptrecord may open it a moment later (a review).
    const bool fifo = S_ISFIFO(st.st_mode);
    for (int tries = 0;; ++tries) {
      fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
      if (fd >= 0 || !fifo || errno != ENXIO || tries == 40) break;
      ::usleep(50000);
    }
    if (fd < 0 && fifo && errno == ENXIO) {
      return absl::FailedPreconditionError(
          absl::StrCat(path,
                       " is a FIFO that no process opened to read within 2 s: start its "
                       "reader first"));
    }
    if (fd < 0) return ErrnoStatus(errno, "open ", path);
    if (fifo && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
      const int error = errno;
      ::close(fd);
      return ErrnoStatus(error, "fcntl ", path);
    }
    return CreateFromFd(fd, path, options);
  }
  if (exists && options.overwrite) {
    // A file (or a link) to replace: the recording goes to a new file beside it, which takes
    // its place at Publish(); until then it stays as it was (sweep 31c F1, F3: a failed start
    // lost it, a second recording to the same path truncated the first's file as it wrote).
    for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
      temp = absl::StrCat(path, ".ptrecord-", ::getpid(), "-", attempt);
      fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0 && errno != EEXIST) return ErrnoStatus(errno, "create ", temp);
    }
    if (fd < 0) return ErrnoStatus(EEXIST, "create ", temp);
  } else {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST) {
        return absl::AlreadyExistsError(
            absl::StrCat(path, " already exists: remove it or allow overwriting it"));
      }
      return ErrnoStatus(errno, "create ", path);
    }
  }
  absl::StatusOr<std::unique_ptr<ContainerWriter>> writer = CreateFromFd(fd, path, options);
  if (!writer.ok()) {
    ::unlink(temp.empty() ? path.c_str() : temp.c_str());
    return writer.status();
  }
  (*writer)->state_->created = temp.empty() ? path : temp;
  (*writer)->state_->replaces = !temp.empty();
  return writer;
}

absl::Status ContainerWriter::Publish() {
  State& s = *state_;
  if (s.created.empty()) return absl::OkStatus();
  const std::string created = std::exchange(s.created, "");
  if (s.replaces && ::rename(created.c_str(), s.name.c_str()) != 0) {
    return ErrnoStatus(errno, "rename ", created, " to ", s.name);
  }
  return absl::OkStatus();
}

void ContainerWriter::Discard() {
  Abandon().IgnoreError();
  if (!state_->created.empty()) ::unlink(std::exchange(state_->created, "").c_str());
}

absl::StatusOr<std::unique_ptr<ContainerWriter>> ContainerWriter::CreateFromFd(
    int fd, const std::string& name, const WriterOptions& options) {
  auto state = std::make_unique<State>();
  state->fd.reset(fd);
  state->name = name;
  state->options = options;
  state->cctx.reset(ZSTD_createCCtx());
  if (state->cctx == nullptr) {
    return absl::ResourceExhaustedError("cannot allocate a zstd compression context");
  }
  // The context and its parameters are reused for every record; each record is still one
  // independent zstd frame (with its content size), so damage never spreads between records.
  size_t z = ZSTD_CCtx_setParameter(state->cctx.get(), ZSTD_c_compressionLevel, options.zstd_level);
  if (ZSTD_isError(z)) {
    return absl::InvalidArgumentError(
        absl::StrCat("zstd level ", options.zstd_level, ": ", ZSTD_getErrorName(z)));
  }
  // A compression helper on a process pinned to one CPU only takes turns with the writer
  // thread: with the drain pinned to one CPU, zstd-1 on real PT ran at 668 MB/s with the helper
  // and 819 MB/s without.
  const int threads =
      options.compress_threads > 0 ? options.compress_threads : (UsableCpus() > 1 ? 2 : 1);
  if (options.compress && threads > 1) {
    state->helper_cctx.reset(ZSTD_createCCtx());
    if (state->helper_cctx == nullptr) {
      return absl::ResourceExhaustedError("cannot allocate a zstd compression context");
    }
    ZSTD_CCtx_setParameter(state->helper_cctx.get(), ZSTD_c_compressionLevel, options.zstd_level);
  }
  state->buffer.reserve(kWriteAlign);
  uint8_t header[kFileHeaderSize];
  EncodeFileHeader(header);
  iovec iov{header, kFileHeaderSize};
  uint64_t written = 0;
  if (absl::Status s = WriteAll(fd, &iov, 1, name, written); !s.ok()) return s;
  state->file_size = state->whole_size = kFileHeaderSize;
  State* raw = state.get();
  state->thread = std::thread([raw] { raw->Run(); });
  if (state->helper_cctx != nullptr) state->helper = std::thread([raw] { raw->RunHelper(); });
  return std::unique_ptr<ContainerWriter>(new ContainerWriter(std::move(state)));
}

absl::Status ContainerWriter::AppendMetadata(std::string_view json) {
  return Append(RecordType::kMetadata, std::vector<uint8_t>(json.begin(), json.end()));
}

absl::Status ContainerWriter::Append(RecordType type, std::vector<uint8_t> payload) {
  if (type == RecordType::kFooter) {
    return absl::InvalidArgumentError("the footer record is written by Close()");
  }
  if (payload.size() > kMaxPayloadSize) {
    return absl::InvalidArgumentError(absl::StrCat("record of ", payload.size(),
                                                   " bytes exceeds the limit of ", kMaxPayloadSize,
                                                   ": split it"));
  }
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  auto has_room = [&s, n = payload.size()]() ABSL_SHARED_LOCKS_REQUIRED(s.mu) {
    return s.queued_bytes == 0 || s.queued_bytes + n <= s.options.queue_bytes || !s.error.ok() ||
           s.closing;
  };
  if (!has_room()) {
    ++s.stats.producer_waits;
    s.mu.Await(absl::Condition(&has_room));
  }
  if (!s.error.ok()) return s.error;
  if (s.closing) return absl::FailedPreconditionError(absl::StrCat(s.name, " is closed"));
  s.queued_bytes += payload.size();
  ++s.enqueued;
  s.queue.push_back(Item{static_cast<uint16_t>(type), std::move(payload)});
  return absl::OkStatus();
}

absl::Status ContainerWriter::Flush() {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  if (s.closed) return s.error;
  uint64_t target = s.enqueued;
  s.flush_requested = true;
  auto done = [&s, target]() ABSL_SHARED_LOCKS_REQUIRED(s.mu) {
    return s.flushed >= target || !s.error.ok() || s.closed;
  };
  s.mu.Await(absl::Condition(&done));
  return s.error;
}

absl::Status ContainerWriter::Close() {
  absl::Status status = Finish(/*footer=*/true);
  absl::Status published = Publish();
  return status.ok() ? published : status;
}

absl::Status ContainerWriter::Abandon() { return Finish(/*footer=*/false); }

absl::Status ContainerWriter::Finish(bool footer) {
  State& s = *state_;
  {
    absl::MutexLock lock(&s.mu);
    if (s.closing) {
      s.mu.Await(absl::Condition(&s.closed));
      return s.error;
    }
    s.closing = true;
    s.abandon = !footer;
  }
  s.thread.join();
  if (s.helper.joinable()) {
    {
      absl::MutexLock lock(&s.hmu);
      s.helper_stop = true;
    }
    s.helper.join();
  }
  absl::MutexLock lock(&s.mu);
  return s.error;
}

std::vector<uint8_t> ContainerWriter::RecycledBuffer() {
  absl::MutexLock lock(&state_->mu);
  if (state_->pool.empty()) return {};
  std::vector<uint8_t> b = std::move(state_->pool.back());
  state_->pool.pop_back();
  return b;
}

WriterStats ContainerWriter::stats() const {
  absl::MutexLock lock(&state_->mu);
  return state_->stats;
}

absl::Status AppendArchivedFile(ContainerWriter& writer, const std::string& path,
                                const std::string& read_from, const std::vector<uint8_t>& build_id,
                                bool debug_file) {
  const ScopedFd fd(open(read_from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, read_from);
  const off_t size = lseek(fd.get(), 0, SEEK_END);
  if (size < 0) return ErrnoStatus(errno, read_from);
  // The record's header, path and build-id besides the bytes.
  if (static_cast<uint64_t>(size) + path.size() + build_id.size() + 64 > kMaxPayloadSize) {
    return absl::ResourceExhaustedError(absl::StrCat(
        read_from, ": ", size, " bytes, more than a record holds (", kMaxPayloadSize, ")"));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n =
        pread(fd.get(), bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, read_from);
    if (n == 0) return absl::DataLossError(absl::StrCat(read_from, ": shorter than its size"));
    done += static_cast<size_t>(n);
  }
  return writer.AppendCode(
      CodeRecord{.pid = 0,
                 .flags = kCodeArchivedFile | (debug_file ? kCodeDebugFile : 0),
                 .address = 0,
                 .pgoff = 0,
                 .path = path,
                 .build_id = build_id,
                 .bytes = bytes});
}

}  // namespace ptkit
