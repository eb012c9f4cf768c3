#include "ptkit/container_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"

namespace ptkit {
namespace {

constexpr size_t kWindowSize = size_t{1} << 20;
constexpr size_t kScanChunk = size_t{64} << 10;
constexpr uint8_t kSyncBytes[4] = {0x50, 0x4b, 0x54, 0x52};  // kFrameSync, little-endian

class FileSource final : public ByteSource {
 public:
  FileSource(ScopedFd fd, uint64_t size, std::string name)
      : fd_(std::move(fd)), size_(size), name_(std::move(name)) {}
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  absl::StatusOr<size_t> ReadAt(uint64_t offset, std::span<uint8_t> out) override {
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd_.get(), out.data() + done, out.size() - done,
                          static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "read ", name_, " at offset ", offset + done);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

 private:
  ScopedFd fd_;
  uint64_t size_;
  std::string name_;
};

class MemSource final : public ByteSource {
 public:
  MemSource(std::span<const uint8_t> bytes, std::string name)
      : bytes_(bytes), name_(std::move(name)) {}
  uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const override { return name_; }
  absl::StatusOr<size_t> ReadAt(uint64_t offset, std::span<uint8_t> out) override {
    if (offset >= bytes_.size()) return 0;
    size_t n = std::min<uint64_t>(out.size(), bytes_.size() - offset);
    if (n > 0) std::memcpy(out.data(), bytes_.data() + offset, n);  // out may be empty (null)
    return n;
  }

 private:
  std::span<const uint8_t> bytes_;
  std::string name_;
};

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// Bytes that grow without zeroing what is written over anyway (a vector's resize zeroed each
// record's growth: 24 M of the 336 M instructions of reading a 56 MB trace in 596 records).
struct Buffer {
  std::unique_ptr<uint8_t[]> data;
  size_t capacity = 0;
  uint8_t* Reserve(size_t n) {
    if (n > capacity) {
      data = std::make_unique_for_overwrite<uint8_t[]>(n);
      capacity = n;
    }
    return data.get();
  }
};

// ReadAhead: how many decompressed bytes the reading thread may hold ahead of Next() (at least
// one record, however large).
constexpr size_t kAheadBytes = size_t{8} << 20;

bool IsKnownType(uint16_t t) {
  return t >= static_cast<uint16_t>(RecordType::kMetadata) &&
         t <= static_cast<uint16_t>(RecordType::kPerfFeature);
}

// Parses a known record kind's payload; the error says what is wrong with it.
absl::Status CheckPayload(RecordType type, std::span<const uint8_t> payload) {
  switch (type) {
    case RecordType::kSideband:
      return ParseSideband(payload).status();
    case RecordType::kAux:
      return ParseAux(payload).status();
    case RecordType::kLoss:
      return ParseLoss(payload).status();
    case RecordType::kSnapshot:
      return ParseSnapshot(payload).status();
    case RecordType::kCode:
      return ParseCode(payload).status();
    case RecordType::kCounters:
      return ParseCounters(payload).status();
    case RecordType::kSample:
      return ParseSample(payload).status();
    case RecordType::kPerfFeature:
      return ParsePerfFeature(payload).status();
    default:
      return absl::OkStatus();  // metadata: JSON, read by its users; the footer: below
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ByteSource>> OpenFileSource(const std::string& path) {
  if (path == "-") {  // perf's name for standard input (perf script -i -)
    return absl::InvalidArgumentError(
        "-: a recording is not read from standard input (it is read at random offsets): write "
        "it to a file first (e.g. perf record -o - ... > perf.data)");
  }
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, "open ", path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat ", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  return std::make_unique<FileSource>(std::move(fd), static_cast<uint64_t>(st.st_size), path);
}

std::unique_ptr<ByteSource> MemorySource(std::span<const uint8_t> bytes, std::string name) {
  return std::make_unique<MemSource>(bytes, std::move(name));
}

uint64_t ReadReport::lost_bytes() const {
  uint64_t n = 0;
  for (const Damage& d : damage) n += d.bytes;
  return n;
}

uint64_t ReadReport::lost_records() const {
  // Saturating: each count is bounded by the file's size, their sum by nothing.
  uint64_t n = 0;
  for (const Damage& d : damage) {
    n = d.records > UINT64_MAX - n ? UINT64_MAX : n + d.records;
  }
  return n;
}

struct ContainerReader::State {
  std::unique_ptr<ByteSource> src;
  uint64_t size = 0;
  uint64_t pos = kFileHeaderSize;
  uint64_t expected_sequence = 0;
  bool done = false;
  int only = -1;  // ReadOnly's type, or -1
  ReadReport report;
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx;

  // Read-ahead window over the file, so small records cost no system call each.
  std::vector<uint8_t> window;
  uint64_t window_offset = 0;
  size_t window_len = 0;
  std::vector<uint8_t> large;  // payloads that do not fit the window
  Buffer raw;                  // decompressed payload
  // Record kind -> records read whole (returned, or skipped as a copy or malformed), for the
  // footer's counts.
  std::map<uint16_t, uint64_t> read;
  // The checksum (XXH3 of the stored bytes) of every trace record (AUX, snapshot) returned so far
  // -> its offset.
  std::unordered_map<uint64_t, uint64_t> trace_payloads;

  // ReadAhead's thread and what it read: records in order, each with its own payload bytes;
  // the last one (the end or an error) stays at the front once reached.
  struct Ahead {
    struct Slot {
      absl::StatusOr<bool> more;
      RecordView view;
      Buffer bytes;
    };
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Slot> ready;
    size_t ready_bytes = 0;
    std::vector<Buffer> spare;  // payload buffers Next() is done with, for the thread to reuse
    Buffer held;                // the payload of the record Next() returned last
    bool stop = false;
    std::thread thread;
  };
  bool ahead_wanted = false;
  std::unique_ptr<Ahead> ahead;  // started by the first Next() after ReadAhead()

  ~State() { StopAhead(); }
  // Next() on this thread: the next valid record, its payload valid until the next call.
  absl::StatusOr<bool> Read(RecordView& out);
  // The reading thread's loop: Read() into the queue until the end, an error or StopAhead.
  void ReadAheadLoop();
  // Ends the reading thread after the record it reads (if any); Next() returns what it queued,
  // then reads on the caller's thread from where it stopped.
  void StopAhead();
  // Returns `n` bytes at `offset` (the caller has checked they lie inside the file), valid
  // until the next call.
  absl::StatusOr<std::span<const uint8_t>> Get(uint64_t offset, size_t n);
  // Finds the next authentic frame header after `from`, records the damage in between and
  // moves `pos` there (or to the end of the file).
  absl::Status Resync(uint64_t from, const std::string& reason);
  void AddDamage(uint64_t offset, uint64_t bytes, uint64_t records, std::string reason) {
    report.damage.push_back(Damage{offset, bytes, records, std::move(reason)});
  }
  // Checks a frame header's sizes against the format limits.
  static absl::Status CheckSizes(const FrameHeader& h);
  // A sequence number further past the expected one than the whole file has room for records
  // (each at least a frame header): its field is damaged (or forged) with a header check that
  // still holds. Taken as the lost records' count, it would also make every later record a
  // repeat to skip.
  bool ImplausibleJump(uint64_t sequence) const {
    return sequence > expected_sequence && sequence - expected_sequence > size / kFrameHeaderSize;
  }
};

absl::StatusOr<std::span<const uint8_t>> ContainerReader::State::Get(uint64_t offset, size_t n) {
  if (offset >= window_offset && offset + n <= window_offset + window_len) {
    return std::span<const uint8_t>(window.data() + (offset - window_offset), n);
  }
  if (n > kWindowSize) {
    large.resize(n);
    PTKIT_ASSIGN_OR_RETURN(size_t got, src->ReadAt(offset, large));
    if (got != n) return absl::DataLossError(absl::StrCat(src->name(), " shrank while reading"));
    return std::span<const uint8_t>(large);
  }
  size_t want = static_cast<size_t>(std::min<uint64_t>(kWindowSize, size - offset));
  if (window.size() < want) window.resize(std::min<uint64_t>(kWindowSize, size));
  PTKIT_ASSIGN_OR_RETURN(size_t got, src->ReadAt(offset, std::span<uint8_t>(window.data(), want)));
  window_offset = offset;
  window_len = got;
  if (got < n) return absl::DataLossError(absl::StrCat(src->name(), " shrank while reading"));
  return std::span<const uint8_t>(window.data(), n);
}

absl::Status ContainerReader::State::CheckSizes(const FrameHeader& h) {
  if (h.stored_size > kMaxPayloadSize || h.raw_size > kMaxPayloadSize) {
    return absl::DataLossError(absl::StrFormat("record sizes out of range (stored %u, raw %u)",
                                               h.stored_size, h.raw_size));
  }
  if (!(h.flags & kFrameZstd) && h.raw_size != h.stored_size) {
    return absl::DataLossError("uncompressed record with differing sizes");
  }
  return absl::OkStatus();
}

absl::Status ContainerReader::State::Resync(uint64_t from, const std::string& reason) {
  uint64_t scan = from + 1;
  while (scan + kFrameHeaderSize <= size) {
    size_t len = static_cast<size_t>(std::min<uint64_t>(kScanChunk, size - scan));
    PTKIT_ASSIGN_OR_RETURN(auto chunk, Get(scan, len));
    // Copy: Get() below may move the window.
    std::vector<uint8_t> bytes(chunk.begin(), chunk.end());
    size_t i = 0;
    while (i + sizeof(kSyncBytes) <= bytes.size()) {
      auto hit =
          std::search(bytes.begin() + i, bytes.end(), std::begin(kSyncBytes), std::end(kSyncBytes));
      if (hit == bytes.end()) break;
      uint64_t candidate = scan + (hit - bytes.begin());
      i = static_cast<size_t>(hit - bytes.begin()) + 1;
      if (candidate + kFrameHeaderSize > size) break;
      PTKIT_ASSIGN_OR_RETURN(auto hb, Get(candidate, kFrameHeaderSize));
      auto h = ParseFrameHeader(hb.first<kFrameHeaderSize>());
      if (!h.ok() || !CheckSizes(*h).ok()) continue;
      // The records numbered before the candidate's were lost in the skipped bytes. A
      // candidate numbered below what is expected repeats an earlier record (a copied block
      // after the damage): expected_sequence stays, so Next() skips it as a repeat instead of
      // returning it, and everything after it, a second time.
      // An implausible number (ImplausibleJump): Next() says so and reads the record as the
      // next expected one; the records lost in the skipped bytes are unknown then.
      const uint64_t records = h->sequence > expected_sequence && !ImplausibleJump(h->sequence)
                                   ? h->sequence - expected_sequence
                                   : 0;
      AddDamage(from, candidate - from, records,
                absl::StrCat(reason, "; resynchronised at offset ", candidate));
      pos = candidate;
      if (!ImplausibleJump(h->sequence)) {
        expected_sequence = std::max(expected_sequence, h->sequence);
      }
      return absl::OkStatus();
    }
    if (len < kScanChunk) break;
    scan += len - (sizeof(kSyncBytes) - 1);
  }
  AddDamage(from, size - from, 1,
            absl::StrCat(reason, "; no valid record after it (at least 1 record lost)"));
  pos = size;
  done = true;
  return absl::OkStatus();
}

ContainerReader::ContainerReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
ContainerReader::ContainerReader(ContainerReader&&) noexcept = default;
ContainerReader& ContainerReader::operator=(ContainerReader&&) noexcept = default;
ContainerReader::~ContainerReader() = default;

absl::StatusOr<ContainerReader> ContainerReader::Open(const std::string& path) {
  PTKIT_ASSIGN_OR_RETURN(auto src, OpenFileSource(path));
  return Open(std::move(src));
}

absl::StatusOr<ContainerReader> ContainerReader::Open(std::unique_ptr<ByteSource> source) {
  const std::string& name = source->name();
  uint64_t size = source->size();
  if (size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": empty file, not a ptkit container"));
  }
  uint8_t header[kFileHeaderSize] = {};
  PTKIT_ASSIGN_OR_RETURN(size_t got, source->ReadAt(0, header));
  if (got < kFileHeaderSize) {
    bool magic_prefix =
        std::equal(header, header + std::min<size_t>(got, kFileMagic.size()), kFileMagic.begin());
    if (magic_prefix) {
      return absl::DataLossError(absl::StrCat(name, ": cut inside the ", kFileHeaderSize,
                                              "-byte file header (", got,
                                              " bytes): no records to read"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a ptkit container (", got, " bytes)"));
  }
  absl::Status header_status = CheckFileHeader(header);
  if (!header_status.ok()) {
    // A damaged header before an intact first record (a flipped byte; a file cut to 0 and
    // written on while ptrecord wrote it): the records are read, the damage said (sweep 38b
    // L1: the whole file was refused). Else this is no container of this format.
    uint8_t first[kFrameHeaderSize] = {};
    absl::StatusOr<size_t> read = source->ReadAt(kFileHeaderSize, first);
    absl::StatusOr<FrameHeader> frame =
        read.ok() && *read == kFrameHeaderSize
            ? ParseFrameHeader(std::span<const uint8_t, kFrameHeaderSize>(first))
            : absl::StatusOr<FrameHeader>(absl::DataLossError("no record"));
    // Only where the magic is what is wrong: a right magic with another version is a newer
    // format's file, not this one damaged (a review).
    const bool magic_damaged = !std::equal(kFileMagic.begin(), kFileMagic.end(), header);
    if (!magic_damaged || !frame.ok() || !State::CheckSizes(*frame).ok() || frame->sequence != 0) {
      return absl::Status(header_status.code(), absl::StrCat(name, ": ", header_status.message()));
    }
  }
  auto state = std::make_unique<State>();
  state->src = std::move(source);
  state->size = size;
  state->report.file_size = size;
  if (!header_status.ok()) {
    state->AddDamage(0, kFileHeaderSize, 0,
                     absl::StrCat("damaged file header (", header_status.message(),
                                  "): the records after it are read"));
  }
  state->dctx.reset(ZSTD_createDCtx());
  if (state->dctx == nullptr) {
    return absl::ResourceExhaustedError("cannot allocate a zstd decompression context");
  }
  return ContainerReader(std::move(state));
}

absl::StatusOr<bool> ContainerReader::Next(RecordView& out) {
  State& s = *state_;
  if (!s.ahead_wanted) return s.Read(out);
  if (s.ahead == nullptr) {
    s.ahead = std::make_unique<State::Ahead>();
    s.ahead->thread = std::thread([&s] { s.ReadAheadLoop(); });
  }
  State::Ahead& a = *s.ahead;
  std::unique_lock<std::mutex> lock(a.mu);
  if (a.held.data != nullptr) a.spare.push_back(std::move(a.held));
  a.held = {};
  if (a.ready.empty() && a.stop) {
    // report() stopped the thread: what it had not read is read here.
    lock.unlock();
    return s.Read(out);
  }
  a.cv.wait(lock, [&] { return !a.ready.empty(); });
  State::Ahead::Slot& front = a.ready.front();
  if (!front.more.ok() || !*front.more) return front.more;  // stays: the answer from now on
  out = front.view;
  a.ready_bytes -= front.bytes.capacity;
  a.held = std::move(front.bytes);
  a.ready.pop_front();
  lock.unlock();
  a.cv.notify_all();
  return true;
}

void ContainerReader::ReadAhead() { state_->ahead_wanted = true; }

void ContainerReader::State::ReadAheadLoop() {
  Ahead& a = *ahead;
  for (;;) {
    Buffer bytes;
    {
      std::unique_lock<std::mutex> lock(a.mu);
      a.cv.wait(lock, [&] { return a.stop || a.ready.empty() || a.ready_bytes < kAheadBytes; });
      if (a.stop) return;
      if (!a.spare.empty()) {
        bytes = std::move(a.spare.back());
        a.spare.pop_back();
      }
    }
    RecordView view;
    absl::StatusOr<bool> more = Read(view);
    const bool end = !more.ok() || !*more;
    if (!end) {
      const size_t n = view.payload.size();
      if (n != 0 && view.payload.data() == raw.data.get()) {
        std::swap(raw, bytes);  // decompressed: its buffer is the record's now
      } else if (n != 0) {
        std::memcpy(bytes.Reserve(n), view.payload.data(), n);
      }
      view.payload = {bytes.data.get(), n};
    }
    {
      std::lock_guard<std::mutex> lock(a.mu);
      a.ready_bytes += bytes.capacity;
      a.ready.push_back({std::move(more), view, std::move(bytes)});
    }
    a.cv.notify_all();
    if (end) return;
  }
}

void ContainerReader::State::StopAhead() {
  if (ahead == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(ahead->mu);
    ahead->stop = true;
  }
  ahead->cv.notify_all();
  if (ahead->thread.joinable()) ahead->thread.join();
}

absl::StatusOr<bool> ContainerReader::State::Read(RecordView& out) {
  State& s = *this;
  while (!s.done) {
    if (s.pos >= s.size) {
      s.done = true;
      break;
    }
    uint64_t at = s.pos;
    if (s.size - at < kFrameHeaderSize) {
      s.AddDamage(at, s.size - at, 1,
                  absl::StrCat("file ends inside the header of record ", s.expected_sequence,
                               " (cut or still being written)"));
      s.done = true;
      break;
    }
    PTKIT_ASSIGN_OR_RETURN(auto hb, s.Get(at, kFrameHeaderSize));
    auto parsed = ParseFrameHeader(hb.first<kFrameHeaderSize>());
    absl::Status sizes = parsed.ok() ? State::CheckSizes(*parsed) : parsed.status();
    if (!sizes.ok()) {
      PTKIT_RETURN_IF_ERROR(s.Resync(
          at, absl::StrCat("damaged record header at offset ", at, " (", sizes.message(), ")")));
      continue;
    }
    FrameHeader h = *parsed;
    uint64_t total = kFrameHeaderSize + h.stored_size;
    if (h.stored_size > s.size - at - kFrameHeaderSize) {
      s.AddDamage(at, s.size - at, 1,
                  absl::StrFormat("file ends inside record %u (%s): %u of %u bytes present "
                                  "(cut or still being written)",
                                  h.sequence, RecordTypeName(h.type), s.size - at, total));
      s.done = true;
      break;
    }
    s.pos = at + total;
    if (s.ImplausibleJump(h.sequence)) {
      s.AddDamage(
          at, 0, 0,
          absl::StrFormat("record %u (%s) at offset %u: a sequence number %u past the "
                          "expected %u, more records than the file's %u bytes hold "
                          "(a damaged header): read as record %u",
                          h.sequence, RecordTypeName(h.type), at, h.sequence - s.expected_sequence,
                          s.expected_sequence, s.size, s.expected_sequence));
      h.sequence = s.expected_sequence;
    }
    if (h.sequence < s.expected_sequence) {
      // A writer numbers its records in order, so this one repeats an earlier one (a copied
      // frame): returning it would have its contents decoded twice.
      s.AddDamage(at, total, 0,
                  absl::StrFormat("record %u (%s) at offset %u repeats an earlier sequence "
                                  "number (expected %u): skipped",
                                  h.sequence, RecordTypeName(h.type), at, s.expected_sequence));
      continue;
    }
    if (s.only >= 0 && h.type != s.only) {
      s.expected_sequence = h.sequence + 1;
      continue;
    }
    PTKIT_ASSIGN_OR_RETURN(auto stored, s.Get(at + kFrameHeaderSize, h.stored_size));
    auto damaged = [&](const std::string& why) {
      uint64_t records = h.sequence > s.expected_sequence ? h.sequence - s.expected_sequence : 0;
      s.AddDamage(at, total, records + 1,
                  absl::StrFormat("record %u (%s) at offset %u: %s", h.sequence,
                                  RecordTypeName(h.type), at, why));
      s.expected_sequence = h.sequence + 1;
    };
    if (XXH3_64bits(stored.data(), stored.size()) != h.checksum) {
      damaged("checksum mismatch");
      continue;
    }
    std::span<const uint8_t> payload = stored;
    if (h.flags & kFrameZstd) {
      unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
      if (content != h.raw_size) {
        damaged("zstd frame size does not match the record header");
        continue;
      }
      size_t n = ZSTD_decompressDCtx(s.dctx.get(), s.raw.Reserve(h.raw_size), h.raw_size,
                                     stored.data(), stored.size());
      if (ZSTD_isError(n) || n != h.raw_size) {
        damaged(absl::StrCat("zstd: ", ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output"));
        continue;
      }
      payload = {s.raw.data.get(), h.raw_size};
    }
    if (h.sequence > s.expected_sequence) {
      s.AddDamage(at, 0, h.sequence - s.expected_sequence,
                  absl::StrCat("records ", s.expected_sequence, "..", h.sequence - 1,
                               " missing before offset ", at));
    }
    s.expected_sequence = h.sequence + 1;
    ++s.read[h.type];
    if (!IsKnownType(h.type)) {
      if (s.report.unknown_types[h.type]++ == 0) {
        s.report.warnings.push_back(
            absl::StrCat("skipping record kind ", h.type, " (written by a newer ptkit?)"));
      }
      continue;
    }
    if (h.type == static_cast<uint16_t>(RecordType::kFooter)) {
      s.report.footer_present = true;
      auto footer = ParseFooter(payload);
      if (!footer.ok()) {
        s.AddDamage(at, total, 0,
                    absl::StrCat("footer at offset ", at, ": ", footer.status().message()));
      } else {
        if (footer->records != h.sequence) {
          s.AddDamage(at, 0, footer->records > h.sequence ? footer->records - h.sequence : 0,
                      absl::StrCat("the footer counts ", footer->records, " records but is record ",
                                   h.sequence));
        }
        // Per kind, what the writer says it wrote against what was read whole. Records lost to
        // damage reported already explain a shortfall; anything else is news.
        uint64_t missing = 0, extra = 0;
        std::string kinds;
        for (const FooterRecord::Kind& k : footer->kinds) {
          const uint64_t read = s.read[k.type];
          if (k.count == read) continue;
          (k.count > read ? missing : extra) += k.count > read ? k.count - read : read - k.count;
          absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", RecordTypeName(k.type), " ", k.count,
                          " (read ", read, ")");
        }
        const uint64_t lost = s.report.lost_records();
        if (extra > 0 || missing > lost) {
          s.AddDamage(at, 0, missing > lost ? missing - lost : 0,
                      absl::StrCat("the footer's record counts disagree with the file: ", kinds));
        }
      }
      if (s.pos < s.size) {
        // `cat a.pt b.pt`: another recording (or junk) after this one's end.
        s.AddDamage(s.pos, s.size - s.pos, 0,
                    absl::StrCat(s.size - s.pos, " bytes after the footer at offset ", at,
                                 " (another recording appended?) are not read"));
        s.done = true;
      }
      // A footer that does not parse is counted as damage above: not returned as well.
      if (!footer.ok()) continue;
    }
    if (IsKnownType(h.type) && h.type != static_cast<uint16_t>(RecordType::kFooter)) {
      if (absl::Status bad = CheckPayload(static_cast<RecordType>(h.type), payload); !bad.ok()) {
        // A valid checksum over a body that does not parse: the writer's bug or a forged record.
        s.AddDamage(at, total, 1,
                    absl::StrFormat("record %u (%s) at offset %u: malformed payload: %s",
                                    h.sequence, RecordTypeName(h.type), at, bad.message()));
        continue;
      }
    }
    if (h.type == static_cast<uint16_t>(RecordType::kAux) ||
        h.type == static_cast<uint16_t>(RecordType::kSnapshot)) {
      // A writer never stores the same trace bytes twice, and each trace payload names its
      // stream, AUX offset and time: an identical payload under a new sequence number is a
      // copied record, and returning it would have its trace decoded twice (a copy of the
      // first AUX record would even pass for a restart of the stream at offset 0). A copy's
      // stored bytes are the original's, so the checksum checked above (XXH3 of them) names
      // them: equal 64-bit hashes are taken as equal bytes (by chance: 1 in 2^64 per pair).
      // (Hashing the payload instead took 44 M of the 164 M instructions of reading a 37 MB
      // trace compressed 16x.)
      auto [it, fresh] = s.trace_payloads.try_emplace(h.checksum, at);
      if (!fresh) {
        s.AddDamage(at, total, 0,
                    absl::StrFormat("record %u (%s) at offset %u is a copy of the record at "
                                    "offset %u: skipped",
                                    h.sequence, RecordTypeName(h.type), at, it->second));
        continue;
      }
    }
    ++s.report.records;
    out.type = static_cast<RecordType>(h.type);
    out.sequence = h.sequence;
    out.offset = at;
    out.stored_bytes = total;
    out.compressed = (h.flags & kFrameZstd) != 0;
    out.payload = payload;
    return true;
  }
  return false;
}

void ContainerReader::ReadOnly(RecordType type) { state_->only = static_cast<int>(type); }

const ReadReport& ContainerReader::report() const {
  state_->StopAhead();  // the report is the reading thread's until it stops
  return state_->report;
}
const std::string& ContainerReader::name() const { return state_->src->name(); }

}  // namespace ptkit
