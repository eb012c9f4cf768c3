#include "container_mutator.h"

#include <linux/perf_event.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <random>
#include <utility>

namespace ptkit::fuzz {
namespace {

// Payloads larger than this are not decompressed here (they stay opaque): inputs are small.
constexpr uint64_t kMaxRaw = 4 << 20;
// The fixed header of an AUX and a snapshot payload; its last u64 is the data size.
constexpr size_t kTraceHeader = 48;

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(v));
}

bool IsTrace(const MutableRecord& r) {
  return !r.opaque &&
         (r.header.type == static_cast<uint16_t>(RecordType::kAux) ||
          r.header.type == static_cast<uint16_t>(RecordType::kSnapshot)) &&
         r.payload.size() >= kTraceHeader;
}

class Mutator {
 public:
  Mutator(unsigned seed, ByteMutator bytes) : rng_(seed), bytes_(std::move(bytes)) {}

  size_t Below(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }
  bool OneIn(size_t n) { return Below(n) == 0; }

  // libFuzzer's mutation of `v` from `at` on, growing it by up to `grow` bytes.
  void MutateBytes(std::vector<uint8_t>& v, size_t at, size_t grow) {
    const size_t size = v.size() - at;
    v.resize(v.size() + grow);
    if (size == 0 && grow == 0) return;
    const size_t n = bytes_(v.data() + at, size, size + grow);
    v.resize(at + std::min(n, size + grow));
  }

  // A value worth trying in place of `old` (a size, an offset, a count, a time).
  uint64_t Interesting(uint64_t old) {
    switch (Below(8)) {
      case 0:
        return 0;
      case 1:
        return old + 1;
      case 2:
        return old - 1;
      case 3:
        return old + (uint64_t{1} << Below(64));
      case 4:
        return ~uint64_t{0} - Below(2);
      case 5:
        return old * 2;
      case 6:
        return old / 2;
      default:
        return (uint64_t{1} << 63) >> Below(64);
    }
  }

  // One change to a trace payload: its data (the size field follows), or a header field.
  void MutateTrace(MutableRecord& r, const MutableContainer& c) {
    uint8_t* p = r.payload.data();
    switch (Below(6)) {
      case 0:
      case 1:
        MutateBytes(r.payload, kTraceHeader, Below(64));
        Store<uint64_t>(r.payload.data() + 40, r.payload.size() - kTraceHeader);
        return;
      case 2: {
        // The AUX offset (or snapshot head): another trace record's, or near the old one.
        std::vector<const MutableRecord*> traces;
        for (const MutableRecord& o : c.records) {
          if (IsTrace(o)) traces.push_back(&o);
        }
        const uint64_t other = Load<uint64_t>(traces[Below(traces.size())]->payload.data() + 16);
        Store<uint64_t>(p + 16, OneIn(2) ? other : Interesting(Load<uint64_t>(p + 16)));
        return;
      }
      case 3:  // flags (AUX) or sequence (snapshot): the four PERF_AUX_FLAG bits mostly
        Store<uint64_t>(p + 24, OneIn(4) ? Interesting(Load<uint64_t>(p + 24)) : Below(16));
        return;
      case 4:  // the stream: kind and id
        if (OneIn(2)) Store<uint32_t>(p, static_cast<uint32_t>(Below(3)));
        Store<uint64_t>(p + 8, OneIn(2) ? Below(4) : Interesting(Load<uint64_t>(p + 8)));
        return;
      default:  // time, or the size field itself
        if (OneIn(2)) {
          Store<uint64_t>(p + 32, Interesting(Load<uint64_t>(p + 32)));
        } else {
          Store<uint64_t>(p + 40, Interesting(Load<uint64_t>(p + 40)));
        }
        return;
    }
  }

  // One change to a sideband payload's perf records (after its 8-byte header): one record's
  // body, its type, a copy of it, or its removal; sizes stay consistent except when the size
  // field itself is the change.
  void MutateSideband(MutableRecord& r) {
    std::vector<uint8_t>& v = r.payload;
    std::vector<std::pair<size_t, size_t>> records;  // offset, size
    for (size_t at = 8; at + sizeof(perf_event_header) <= v.size();) {
      const uint16_t size = Load<uint16_t>(v.data() + at + 6);
      if (size < sizeof(perf_event_header) || size > v.size() - at) break;
      records.emplace_back(at, size);
      at += size;
    }
    if (records.empty()) {
      MutateBytes(v, std::min<size_t>(8, v.size()), Below(64));
      return;
    }
    const auto [at, size] = records[Below(records.size())];
    switch (Below(6)) {
      case 0: {  // the body, in place
        std::vector<uint8_t> body(v.begin() + at + 8, v.begin() + at + size);
        MutateBytes(body, 0, 0);
        std::copy(body.begin(), body.begin() + std::min(body.size(), size - 8ul),
                  v.begin() + at + 8);
        return;
      }
      case 1: {  // another record type
        static constexpr uint32_t kTypes[] = {PERF_RECORD_MMAP,
                                              PERF_RECORD_LOST,
                                              PERF_RECORD_COMM,
                                              PERF_RECORD_EXIT,
                                              PERF_RECORD_FORK,
                                              PERF_RECORD_SAMPLE,
                                              PERF_RECORD_MMAP2,
                                              PERF_RECORD_AUX,
                                              PERF_RECORD_ITRACE_START,
                                              PERF_RECORD_SWITCH,
                                              PERF_RECORD_SWITCH_CPU_WIDE,
                                              PERF_RECORD_LOST_SAMPLES,
                                              PERF_RECORD_KSYMBOL,
                                              PERF_RECORD_TEXT_POKE,
                                              PERF_RECORD_AUX_OUTPUT_HW_ID};
        Store<uint32_t>(v.data() + at, kTypes[Below(std::size(kTypes))]);
        return;
      }
      case 2: {  // a copy of it, somewhere among the others
        std::vector<uint8_t> copy(v.begin() + at, v.begin() + at + size);
        const size_t to = records[Below(records.size())].first;
        v.insert(v.begin() + to, copy.begin(), copy.end());
        return;
      }
      case 3:  // removed
        v.erase(v.begin() + at, v.begin() + at + size);
        return;
      case 4:  // misc (PERF_RECORD_MISC_SWITCH_OUT, cpumode, ...)
        Store<uint16_t>(v.data() + at + 4, static_cast<uint16_t>(1u << Below(16)));
        return;
      default:  // a field of the body set to a value worth trying
        if (size >= 16) {
          const size_t field = at + 8 + 8 * Below((size - 8) / 8);
          Store<uint64_t>(v.data() + field, Interesting(Load<uint64_t>(v.data() + field)));
        }
        return;
    }
  }

  // One record-level change to `c`.
  void Mutate(MutableContainer& c) {
    std::vector<MutableRecord>& rs = c.records;
    if (rs.empty()) {
      MutateBytes(c.tail, 0, Below(256));
      return;
    }
    const size_t i = Below(rs.size());
    MutableRecord& r = rs[i];
    switch (Below(10)) {
      case 0:
      case 1:
      case 2:  // the payload, as its kind is laid out
        if (IsTrace(r)) {
          MutateTrace(r, c);
        } else if (!r.opaque && r.header.type == static_cast<uint16_t>(RecordType::kSideband)) {
          MutateSideband(r);
        } else {
          MutateBytes(r.payload, 0, Below(64));
        }
        if (!r.opaque) r.stored.clear();  // compressed again when written
        return;
      case 3: {  // a copy: the same bytes (same sequence number) or renumbered
        MutableRecord copy = r;
        if (OneIn(2)) copy.header.sequence = rs.back().header.sequence + 1;
        rs.insert(rs.begin() + static_cast<ptrdiff_t>(Below(rs.size() + 1)), std::move(copy));
        return;
      }
      case 4:
        rs.erase(rs.begin() + static_cast<ptrdiff_t>(i));
        return;
      case 5:
        std::swap(r, rs[Below(rs.size())]);
        return;
      case 6:  // the sequence number
        r.header.sequence = OneIn(2) ? Interesting(r.header.sequence) : Below(rs.size() + 2);
        return;
      case 7:  // the kind (unknown kinds too), or the compression
        if (OneIn(2)) {
          r.header.type = static_cast<uint16_t>(1 + Below(9));
        } else {
          r.zstd = !r.zstd;
        }
        return;
      case 8:  // every record numbered in order again (repairs what deletions and copies did)
        for (size_t k = 0; k < rs.size(); ++k) rs[k].header.sequence = k;
        return;
      default:  // the end of the file
        if (OneIn(2) || c.tail.empty()) {
          c.tail.assign(rs.back().payload.begin(),
                        rs.back().payload.begin() + Below(rs.back().payload.size() + 1));
        } else {
          c.tail.clear();
        }
        return;
    }
  }

 private:
  std::mt19937 rng_;  // (minstd_rand's first values from small seeds are all small)
  ByteMutator bytes_;
};

}  // namespace

std::optional<MutableContainer> SplitContainer(std::span<const uint8_t> file) {
  if (file.size() < kFileHeaderSize || !CheckFileHeader(file.first<kFileHeaderSize>()).ok()) {
    return std::nullopt;
  }
  MutableContainer c;
  size_t at = kFileHeaderSize;
  while (at + kFrameHeaderSize <= file.size()) {
    // Every frame whose sync word is intact, whatever its header check says (it is
    // recomputed when written).
    const uint8_t* p = file.data() + at;
    if (Load<uint32_t>(p) != kFrameSync) break;
    MutableRecord r;
    FrameHeader* h = &r.header;
    h->type = Load<uint16_t>(p + 4);
    h->flags = Load<uint16_t>(p + 6);
    h->sequence = Load<uint64_t>(p + 8);
    h->stored_size = Load<uint64_t>(p + 16);
    h->raw_size = Load<uint64_t>(p + 24);
    if (h->stored_size > file.size() - at - kFrameHeaderSize) break;  // a cut frame stays cut
    const std::span<const uint8_t> stored = file.subspan(at + kFrameHeaderSize, h->stored_size);
    r.payload.assign(stored.begin(), stored.end());
    if (h->flags & kFrameZstd) {
      r.zstd = true;
      r.opaque = true;
      if (h->raw_size <= kMaxRaw) {
        std::vector<uint8_t> raw(h->raw_size);
        static ZSTD_DCtx* const dctx = ZSTD_createDCtx();
        const size_t n =
            ZSTD_decompressDCtx(dctx, raw.data(), raw.size(), stored.data(), stored.size());
        if (!ZSTD_isError(n) && n == raw.size()) {
          r.stored = std::move(r.payload);
          r.payload = std::move(raw);
          r.opaque = false;
        }
      }
    }
    c.records.push_back(std::move(r));
    at += kFrameHeaderSize + h->stored_size;
  }
  c.tail.assign(file.begin() + at, file.end());
  return c;
}

std::vector<uint8_t> JoinContainer(const MutableContainer& c) {
  std::vector<uint8_t> out(kFileHeaderSize);
  EncodeFileHeader(std::span<uint8_t, kFileHeaderSize>(out.data(), kFileHeaderSize));
  std::vector<uint8_t> packed;
  for (const MutableRecord& r : c.records) {
    FrameHeader h = r.header;
    std::span<const uint8_t> stored = r.payload;
    if (r.opaque) {
      h.flags |= kFrameZstd;  // stored as it was read
    } else if (r.zstd && !r.stored.empty()) {
      stored = r.stored;  // unchanged: as it was read
      h.flags |= kFrameZstd;
      h.raw_size = r.payload.size();
    } else if (r.zstd) {
      static ZSTD_CCtx* const cctx = ZSTD_createCCtx();
      packed.resize(ZSTD_compressBound(r.payload.size()));
      const size_t n = ZSTD_compressCCtx(cctx, packed.data(), packed.size(), r.payload.data(),
                                         r.payload.size(), 1);
      if (ZSTD_isError(n)) continue;
      stored = std::span<const uint8_t>(packed.data(), n);
      h.flags |= kFrameZstd;
      h.raw_size = r.payload.size();
    } else {
      h.flags &= ~kFrameZstd;
      h.raw_size = r.payload.size();
    }
    h.stored_size = stored.size();
    h.checksum = XXH3_64bits(stored.data(), stored.size());
    const size_t at = out.size();
    out.resize(at + kFrameHeaderSize);
    EncodeFrameHeader(h, std::span<uint8_t, kFrameHeaderSize>(out.data() + at, kFrameHeaderSize));
    out.insert(out.end(), stored.begin(), stored.end());
  }
  out.insert(out.end(), c.tail.begin(), c.tail.end());
  return out;
}

size_t MutateContainer(uint8_t* data, size_t size, size_t max_size, unsigned seed,
                       const ByteMutator& bytes) {
  Mutator m(seed, bytes);
  std::optional<MutableContainer> c;
  if (!m.OneIn(8)) c = SplitContainer(std::span<const uint8_t>(data, size));
  if (!c) return bytes(data, size, max_size);
  for (size_t n = 1 + (m.OneIn(4) ? m.Below(3) : 0); n > 0; --n) m.Mutate(*c);
  const std::vector<uint8_t> out = JoinContainer(*c);
  if (out.size() > max_size) return bytes(data, size, max_size);
  std::copy(out.begin(), out.end(), data);
  return out.size();
}

size_t CrossOverContainers(std::span<const uint8_t> first, std::span<const uint8_t> second,
                           uint8_t* out, size_t max_out, unsigned seed) {
  std::optional<MutableContainer> a = SplitContainer(first);
  std::optional<MutableContainer> b = SplitContainer(second);
  if (!a || !b || b->records.empty()) return 0;
  Mutator m(seed, nullptr);
  // Records [from, from + n) of the second, at a record boundary of the first.
  const size_t from = m.Below(b->records.size());
  const size_t n = 1 + m.Below(b->records.size() - from);
  const size_t at = m.Below(a->records.size() + 1);
  a->records.insert(a->records.begin() + static_cast<ptrdiff_t>(at),
                    b->records.begin() + static_cast<ptrdiff_t>(from),
                    b->records.begin() + static_cast<ptrdiff_t>(from + n));
  const std::vector<uint8_t> joined = JoinContainer(*a);
  if (joined.size() > max_out) return 0;
  std::copy(joined.begin(), joined.end(), out);
  return joined.size();
}

}  // namespace ptkit::fuzz
