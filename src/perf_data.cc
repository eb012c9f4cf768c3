#include "ptkit/perf_data.h"

#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "bytes.h"
#include "ptkit/perf_data_format.h"
#include "ptkit/status.h"

namespace ptkit::perf {
namespace {

using internal::ByteReader;
using internal::Load;

constexpr size_t kWindowBytes = 1 << 20;
constexpr uint32_t kMaxAttrSize = 4096;  // perf_event_attr is 136 bytes in 6.1

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// Read-ahead window over the source, so small records cost no system call each.
class Window {
 public:
  explicit Window(ByteSource& src) : src_(src) {}
  // Up to `n` bytes at `offset` (fewer only at the end of the file), valid until the next call.
  absl::StatusOr<std::span<const uint8_t>> Get(uint64_t offset, size_t n) {
    if (offset >= start_ && offset - start_ <= len_ && n <= len_ - (offset - start_)) {
      return std::span<const uint8_t>(buf_).subspan(offset - start_, n);
    }
    const uint64_t size = src_.size();
    if (offset >= size) return std::span<const uint8_t>();
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>(std::max<size_t>(n, kWindowBytes), size - offset));
    buf_.resize(want);
    absl::StatusOr<size_t> got = src_.ReadAt(offset, buf_);
    if (!got.ok()) return got.status();
    start_ = offset;
    len_ = *got;
    return std::span<const uint8_t>(buf_).first(std::min(n, len_));
  }

 private:
  ByteSource& src_;
  std::vector<uint8_t> buf_;
  uint64_t start_ = 0;
  size_t len_ = 0;
};

struct Section {
  uint64_t offset = 0, size = 0;
};

// A perf feature string: u32 length (NUL padding included), then the bytes.
std::optional<std::string> GetString(ByteReader& r) {
  const uint32_t len = r.Get<uint32_t>();
  std::span<const uint8_t> b = r.GetBytes(len);
  if (!r.ok()) return std::nullopt;
  const char* p = reinterpret_cast<const char*>(b.data());
  return std::string(p, strnlen(p, b.size()));
}

class Parser {
 public:
  Parser(ByteSource& src, PerfData& out) : src_(src), win_(src), out_(out) {}

  absl::Status Run();

 private:
  void AddDamage(uint64_t offset, uint64_t bytes, std::string reason) {
    out_.damage.push_back(Damage{offset, bytes, 0, std::move(reason)});
  }
  absl::Status RunFile(std::span<const uint8_t> header);
  absl::Status ReadAttrs(uint64_t attr_size, Section attrs);
  absl::Status ReadFeatures(uint64_t table_offset, std::span<const uint8_t> bitmap);
  // Walks the records in [begin, end); `cut_reason` names what ends early when end is past
  // the end of the file.
  absl::Status Walk(uint64_t begin, uint64_t end);
  void AddRecord(std::span<const uint8_t> bytes, uint64_t offset, bool in_compressed);
  void Handle(const RecordView& r, uint64_t offset, bool in_compressed);
  void Decompress(const RecordView& r, uint64_t offset);
  void ParseAttr(std::span<const uint8_t> attr_bytes, uint64_t offset, PerfAttr& a, bool& ok);
  void ParseFeature(uint32_t id, std::span<const uint8_t> data, uint64_t offset);
  void ParseBuildIds(std::span<const uint8_t> data, uint64_t offset);
  // Feature `id`'s bytes into features.kept when it is KeptAsBytes.
  void Keep(uint32_t id, std::vector<uint8_t> bytes);

  ByteSource& src_;
  Window win_;
  PerfData& out_;
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx_;
  std::vector<uint8_t> pending_;  // decompressed bytes of a record not yet whole
  uint64_t decompressed_total_ = 0;
};

absl::Status Parser::Run() {
  out_.file_size = src_.size();
  PTKIT_ASSIGN_OR_RETURN(std::span<const uint8_t> head, win_.Get(0, kFileHeaderSize));
  if (head.size() < kPipeHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(src_.name(), ": not a perf.data (", head.size(),
                                                   " bytes, a header needs 16)"));
  }
  if (std::memcmp(head.data(), kMagicSwapped, 8) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        src_.name(), ": a perf.data of the other byte order, which ptkit does not read"));
  }
  if (!IsPerfData(head)) {
    return absl::InvalidArgumentError(
        absl::StrCat(src_.name(), ": not a perf.data (no PERFILE2 magic)"));
  }
  const uint64_t hsize = Load<uint64_t>(head.data() + 8);
  if (hsize == kPipeHeaderSize) {
    out_.pipe = true;
    return Walk(kPipeHeaderSize, out_.file_size);
  }
  if (hsize < kFileHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(src_.name(), ": perf.data header size ", hsize,
                                                   " is neither 16 (pipe) nor >= 104 (file)"));
  }
  if (head.size() < kFileHeaderSize) {
    AddDamage(0, head.size(), "file header cut: the file ends inside the 104-byte header");
    return absl::OkStatus();
  }
  std::vector<uint8_t> copy(head.begin(), head.end());
  return RunFile(copy);
}

absl::Status Parser::RunFile(std::span<const uint8_t> header) {
  ByteReader r(header.subspan(16));
  const uint64_t attr_size = r.Get<uint64_t>();
  Section attrs{r.Get<uint64_t>(), r.Get<uint64_t>()};
  Section data{r.Get<uint64_t>(), r.Get<uint64_t>()};
  r.GetBytes(kFileSectionSize);  // event_types: unused since perf 2.6.x
  std::span<const uint8_t> bitmap = r.GetBytes(32);
  std::vector<uint8_t> features(bitmap.begin(), bitmap.end());
  PTKIT_RETURN_IF_ERROR(ReadAttrs(attr_size, attrs));
  const uint64_t size = out_.file_size;
  if (data.offset > size) {
    AddDamage(data.offset, data.size,
              absl::StrCat("data section at ", data.offset, " starts past the end of the file (",
                           size, " bytes)"));
    return absl::OkStatus();
  }
  uint64_t end = data.offset + data.size;
  if (data.size > size - data.offset) {
    AddDamage(size, data.size - (size - data.offset),
              absl::StrCat("data section cut: it has ", data.size, " bytes from ", data.offset,
                           ", the file ends at ", size));
    end = size;
  }
  if (data.size == 0 && size > data.offset) {
    out_.warnings.push_back(
        "data section size is 0 (perf record did not finish): reading to the end of the file");
    end = size;
  }
  PTKIT_RETURN_IF_ERROR(Walk(data.offset, end));
  if (data.size != 0) PTKIT_RETURN_IF_ERROR(ReadFeatures(data.offset + data.size, features));
  return absl::OkStatus();
}

void Parser::ParseAttr(std::span<const uint8_t> b, uint64_t offset, PerfAttr& a, bool& ok) {
  ok = false;
  if (b.size() < PERF_ATTR_SIZE_VER0) {
    AddDamage(offset, b.size(),
              absl::StrCat("perf_event_attr of ", b.size(),
                           " bytes is shorter than the first "
                           "version's 64"));
    return;
  }
  uint32_t size = Load<uint32_t>(b.data() + 4);
  a.size = size;
  if (size == 0) size = PERF_ATTR_SIZE_VER0;
  if (size < PERF_ATTR_SIZE_VER0 || size > b.size()) {
    AddDamage(offset, b.size(),
              absl::StrCat("perf_event_attr size ", a.size, " invalid (", b.size(),
                           " bytes available, the first version has 64)"));
    return;
  }
  a.raw.assign(b.begin(), b.begin() + size);
  std::memcpy(&a.attr, b.data(), std::min<size_t>(size, sizeof(perf_event_attr)));
  ok = true;
}

absl::Status Parser::ReadAttrs(uint64_t attr_size, Section attrs) {
  const uint64_t size = out_.file_size;
  if (attrs.size == 0) return absl::OkStatus();
  if (attr_size < kFileSectionSize + PERF_ATTR_SIZE_VER0 ||
      attr_size > kMaxAttrSize + kFileSectionSize) {
    AddDamage(attrs.offset, attrs.size,
              absl::StrCat("attr entry size ", attr_size, " invalid: no attrs read"));
    return absl::OkStatus();
  }
  if (attrs.offset > size || attrs.size > size - attrs.offset) {
    AddDamage(attrs.offset, attrs.size,
              absl::StrCat("attr section [", attrs.offset, ", +", attrs.size,
                           ") lies past the end of the file (", size, " bytes)"));
    attrs.size = attrs.offset > size ? 0 : size - attrs.offset;
  }
  if (attrs.size % attr_size != 0) {
    out_.warnings.push_back(absl::StrCat("attr section of ", attrs.size,
                                         " bytes is not a multiple of the entry size ", attr_size));
  }
  uint64_t ids_total = 0;  // all ids together fit in the file once
  for (uint64_t at = attrs.offset; attrs.offset + attrs.size - at >= attr_size; at += attr_size) {
    PTKIT_ASSIGN_OR_RETURN(std::span<const uint8_t> e, win_.Get(at, attr_size));
    std::vector<uint8_t> entry(e.begin(), e.end());
    if (entry.size() < attr_size) break;
    PerfAttr a;
    bool ok;
    ParseAttr(std::span<const uint8_t>(entry).first(attr_size - kFileSectionSize), at, a, ok);
    if (!ok) continue;
    const uint8_t* ids = entry.data() + attr_size - kFileSectionSize;
    Section s{Load<uint64_t>(ids), Load<uint64_t>(ids + 8)};
    if (s.offset > size || s.size > size - s.offset || s.size % 8 != 0 ||
        s.size / 8 > size / 8 - ids_total) {
      AddDamage(s.offset, s.size,
                absl::StrCat("ids of attr ", out_.attrs.size(), " [", s.offset, ", +", s.size,
                             ") are not inside the file, or overlap the others'"));
    } else {
      ids_total += s.size / 8;
      for (uint64_t i = 0; i < s.size; i += 8) {
        PTKIT_ASSIGN_OR_RETURN(std::span<const uint8_t> id, win_.Get(s.offset + i, 8));
        if (id.size() < 8) break;
        a.ids.push_back(Load<uint64_t>(id.data()));
      }
    }
    for (uint64_t id : a.ids) out_.attr_of_id.emplace(id, out_.attrs.size());
    out_.attrs.push_back(std::move(a));
  }
  return absl::OkStatus();
}

absl::Status Parser::ReadFeatures(uint64_t table_offset, std::span<const uint8_t> bitmap) {
  const uint64_t size = out_.file_size;
  uint64_t at = table_offset;
  for (uint32_t bit = 1; bit < bitmap.size() * 8; ++bit) {
    if (!(bitmap[bit / 8] & (1u << (bit % 8)))) continue;
    out_.features.present.push_back(bit);
    PTKIT_ASSIGN_OR_RETURN(std::span<const uint8_t> e, win_.Get(at, kFileSectionSize));
    if (e.size() < kFileSectionSize) {
      AddDamage(at, 0,
                absl::StrCat("feature table cut: the entry of feature ", bit,
                             " and those after it are missing"));
      return absl::OkStatus();
    }
    Section s{Load<uint64_t>(e.data()), Load<uint64_t>(e.data() + 8)};
    at += kFileSectionSize;
    if (s.offset > size || s.size > size - s.offset) {
      AddDamage(s.offset, s.size,
                absl::StrCat("feature ", bit, " section [", s.offset, ", +", s.size,
                             ") is not inside the file (", size, " bytes)"));
      continue;
    }
    bool parsed = false;
    switch (bit) {
      case kFeatBuildId:
      case kFeatHostname:
      case kFeatOsRelease:
      case kFeatVersion:
      case kFeatArch:
      case kFeatNrCpus:
      case kFeatCpuDesc:
      case kFeatCpuId:
      case kFeatTotalMem:
      case kFeatCmdline:
      case kFeatEventDesc:
      case kFeatGroupDesc:
      case kFeatAuxtrace:
        parsed = true;
        break;
      default:
        break;
    }
    if (!parsed && !KeptAsBytes(bit)) continue;
    if (s.size > kMaxDecompressedBytes) {
      const std::string what = absl::StrCat("feature ", bit, " section of ", s.size, " bytes");
      if (parsed) {
        AddDamage(s.offset, s.size, what + ": too large");
      } else {  // only kept for export: nothing is lost to the decode (as before it was kept)
        out_.warnings.push_back(
            absl::StrCat(what, " (", PerfFeatureName(bit), ") is too large to keep for export"));
      }
      continue;
    }
    PTKIT_ASSIGN_OR_RETURN(std::span<const uint8_t> d, win_.Get(s.offset, s.size));
    std::vector<uint8_t> copy(d.begin(), d.end());
    if (parsed) ParseFeature(bit, copy, s.offset);
    Keep(bit, std::move(copy));
  }
  return absl::OkStatus();
}

void Parser::Keep(uint32_t id, std::vector<uint8_t> bytes) {
  if (!KeptAsBytes(id)) return;
  // One copy per feature (a later one replaces it, as perf reads the last), and at most
  // kMaxDecompressedBytes in all (a review: 40 TRACING_DATA records, or feature sections that
  // all point at one 63 MB stretch, were each kept: 665 MB, 1.1 GB).
  std::vector<KeptFeature>& kept = out_.features.kept;
  std::erase_if(kept, [&](const KeptFeature& k) { return k.id == id; });
  uint64_t total = 0;
  for (const KeptFeature& k : kept) total += k.bytes.size();
  if (total + bytes.size() > kMaxDecompressedBytes) {
    out_.warnings.push_back(absl::StrCat(
        "feature ", PerfFeatureName(id), " (", bytes.size(), " bytes) is not kept for export: the ",
        "features kept would pass ", kMaxDecompressedBytes, " bytes"));
    return;
  }
  kept.push_back({id, std::move(bytes)});
}

void Parser::ParseFeature(uint32_t id, std::span<const uint8_t> data, uint64_t offset) {
  ByteReader r(data);
  PerfFeatures& f = out_.features;
  auto str = [&](std::optional<std::string>& field) {
    field = GetString(r);
    if (!field) AddDamage(offset, data.size(), absl::StrCat("feature ", id, " string cut"));
  };
  switch (id) {
    case kFeatHostname:
      return str(f.hostname);
    case kFeatOsRelease:
      return str(f.osrelease);
    case kFeatVersion:
      return str(f.version);
    case kFeatArch:
      return str(f.arch);
    case kFeatCpuDesc:
      return str(f.cpudesc);
    case kFeatCpuId:
      return str(f.cpuid);
    case kFeatNrCpus: {
      const uint32_t avail = r.Get<uint32_t>(), online = r.Get<uint32_t>();
      if (!r.ok()) return AddDamage(offset, data.size(), "NRCPUS feature cut");
      f.nr_cpus_available = avail;
      f.nr_cpus_online = online;
      return;
    }
    case kFeatTotalMem: {
      const uint64_t kib = r.Get<uint64_t>();
      if (!r.ok()) return AddDamage(offset, data.size(), "TOTAL_MEM feature cut");
      f.total_mem_kib = kib;
      return;
    }
    case kFeatCmdline: {
      const uint32_t n = r.Get<uint32_t>();
      if (!r.ok() || n > r.remaining() / 4) {
        return AddDamage(offset, data.size(),
                         absl::StrCat("CMDLINE feature: ", n, " strings do not fit its ",
                                      data.size(), " bytes"));
      }
      std::vector<std::string> args;
      for (uint32_t i = 0; i < n; ++i) {
        std::optional<std::string> s = GetString(r);
        if (!s) {
          AddDamage(offset, data.size(), absl::StrCat("CMDLINE feature cut at argument ", i));
          break;
        }
        args.push_back(std::move(*s));
      }
      f.cmdline = std::move(args);
      return;
    }
    case kFeatBuildId:
      return ParseBuildIds(data, offset);
    case kFeatEventDesc: {
      // perf's write_event_desc(): u32 events, u32 attr size; per event the attr, u32 ids,
      // the name (a feature string), the ids.
      const uint32_t n = r.Get<uint32_t>(), attr_size = r.Get<uint32_t>();
      if (!r.ok() || attr_size == 0 || n > r.remaining() / (uint64_t{attr_size} + 8)) {
        return AddDamage(offset, data.size(),
                         absl::StrCat("EVENT_DESC feature: ", n, " events of ", attr_size,
                                      " bytes do not fit its ", data.size(), " bytes"));
      }
      for (uint32_t i = 0; i < n; ++i) {
        r.GetBytes(attr_size);
        const uint32_t ids = r.Get<uint32_t>();
        std::optional<std::string> name = GetString(r);
        if (!name || ids > r.remaining() / 8) {
          return AddDamage(offset, data.size(),
                           absl::StrCat("EVENT_DESC feature cut at event ", i));
        }
        EventDescEntry e{std::move(*name), {}};
        for (uint32_t k = 0; k < ids; ++k) e.ids.push_back(r.Get<uint64_t>());
        f.event_desc.push_back(std::move(e));
      }
      return;
    }
    case kFeatGroupDesc: {
      // perf's write_group_desc(): u32 groups; per group its name (a feature string), u32
      // leader index (among the attrs), u32 events (the leader and the members after it).
      const uint32_t n = r.Get<uint32_t>();
      if (!r.ok() || n > r.remaining() / 12) {
        return AddDamage(offset, data.size(),
                         absl::StrCat("GROUP_DESC feature: ", n, " groups do not fit its ",
                                      data.size(), " bytes"));
      }
      for (uint32_t i = 0; i < n; ++i) {
        std::optional<std::string> name = GetString(r);
        GroupDescEntry g{name.value_or(""), r.Get<uint32_t>(), r.Get<uint32_t>()};
        if (!name || !r.ok()) {
          return AddDamage(offset, data.size(),
                           absl::StrCat("GROUP_DESC feature cut at group ", i));
        }
        f.groups.push_back(std::move(g));
      }
      return;
    }
    case kFeatAuxtrace: {
      const uint64_t n = r.Get<uint64_t>();
      if (!r.ok() || n > r.remaining() / 16) {
        return AddDamage(
            offset, data.size(),
            absl::StrCat("AUXTRACE index: ", n, " entries do not fit its ", data.size(), " bytes"));
      }
      for (uint64_t i = 0; i < n; ++i) {
        AuxtraceIndexEntry e;
        e.file_offset = r.Get<uint64_t>();
        e.size = r.Get<uint64_t>();
        f.auxtrace_index.push_back(e);
      }
      return;
    }
    default:
      return;
  }
}

void Parser::ParseBuildIds(std::span<const uint8_t> data, uint64_t offset) {
  RecordReader rr(data);
  for (;;) {
    const size_t at = rr.offset();
    absl::StatusOr<std::optional<RecordView>> rec = rr.Next();
    if (!rec.ok()) {
      AddDamage(offset + at, data.size() - at,
                absl::StrCat("build-id list: ", rec.status().message()));
      return;
    }
    if (!*rec) return;
    ByteReader r((*rec)->body());
    BuildIdEntry e;
    e.misc = (*rec)->misc;
    e.pid = r.Get<int32_t>();
    std::span<const uint8_t> id = r.GetBytes(24);
    if (!r.ok()) {
      AddDamage(offset + at, (*rec)->bytes.size(), "build-id entry shorter than 36 bytes");
      continue;
    }
    const size_t n = (e.misc & kBuildIdSizeMisc) ? std::min<size_t>(id[20], 20) : 20;
    e.build_id.assign(id.begin(), id.begin() + n);
    std::span<const uint8_t> name = r.Rest();
    const char* p = reinterpret_cast<const char*>(name.data());
    e.filename.assign(p, strnlen(p, name.size()));
    out_.features.build_ids.push_back(std::move(e));
  }
}

absl::Status Parser::Walk(uint64_t begin, uint64_t end) {
  uint64_t pos = begin;
  while (pos < end) {
    const uint64_t left = end - pos;
    if (left < kHeaderSize) {
      AddDamage(pos, left,
                absl::StrCat("record header cut: ", left, " bytes left, a header needs 8"));
      return absl::OkStatus();
    }
    PTKIT_ASSIGN_OR_RETURN(std::span<const uint8_t> h, win_.Get(pos, kHeaderSize));
    if (h.size() < kHeaderSize) {
      AddDamage(pos, left, "the file ends inside a record header");
      return absl::OkStatus();
    }
    const auto hdr = Load<perf_event_header>(h.data());
    if (hdr.size < kHeaderSize) {
      AddDamage(pos, left,
                absl::StrCat("perf ", PerfStatsName(hdr.type), " record size ", hdr.size,
                             " is below 8: the rest cannot be framed"));
      return absl::OkStatus();
    }
    if (hdr.size > left) {
      AddDamage(pos, left,
                absl::StrCat("perf ", PerfStatsName(hdr.type), " record of ", hdr.size,
                             " bytes cut: ", left, " bytes left"));
      return absl::OkStatus();
    }
    PTKIT_ASSIGN_OR_RETURN(std::span<const uint8_t> rec, win_.Get(pos, hdr.size));
    if (rec.size() < hdr.size) {
      AddDamage(pos, left, "the file ends inside a record");
      return absl::OkStatus();
    }
    // Pipe mode's TRACING_DATA (the tracepoint formats of a tracepoint event): its u32 size
    // counts bytes that follow the record outside header.size, padded to 8, as perf's
    // perf_event__process_tracing_data skips them. They were read as records: "damage", and
    // every record after them lost (sweep 39a F2).
    uint64_t trailing = 0;
    if (hdr.type == kRecordHeaderTracingData && hdr.size >= kHeaderSize + 4) {
      uint32_t size = 0;
      std::memcpy(&size, rec.data() + kHeaderSize, sizeof(size));
      trailing = (uint64_t{size} + 7) & ~uint64_t{7};
    }
    AddRecord(rec, pos, false);
    const uint64_t record_offset = pos;
    pos += hdr.size;
    if (trailing != 0) {
      if (trailing > end - pos) {
        AddDamage(pos, end - pos,
                  absl::StrCat("TRACING_DATA's ", trailing,
                               " bytes of tracepoint formats cut: ", end - pos, " bytes left"));
        return absl::OkStatus();
      }
      // Its formats are file mode's feature 1 byte for byte (perf's tracing_data_put): the file
      // has that feature, kept or not.
      if (std::find(out_.features.present.begin(), out_.features.present.end(), kFeatTracingData) ==
          out_.features.present.end()) {
        out_.features.present.push_back(kFeatTracingData);
      }
      uint32_t size = 0;
      std::memcpy(&size, out_.record_bytes.data() + out_.records.back().begin + kHeaderSize,
                  sizeof(size));
      if (size > kMaxDecompressedBytes) {
        out_.warnings.push_back(absl::StrCat("TRACING_DATA at ", record_offset, ": ", size,
                                             " bytes of tracepoint formats are too many to keep"));
      } else {
        PTKIT_ASSIGN_OR_RETURN(std::span<const uint8_t> formats, win_.Get(pos, size));
        Keep(kFeatTracingData, std::vector<uint8_t>(formats.begin(), formats.end()));
      }
      pos += trailing;
      continue;
    }
    if (hdr.type != kRecordAuxtrace) continue;
    if (hdr.size < kAuxtraceRecordSize) {
      AddDamage(record_offset, end - record_offset,
                absl::StrCat("AUXTRACE record of ", hdr.size,
                             " bytes is shorter than 48: its trace bytes cannot be skipped"));
      return absl::OkStatus();
    }
    // AddRecord moved the window's bytes into record_bytes; read the fields from there.
    ByteReader r(std::span<const uint8_t>(out_.record_bytes)
                     .subspan(out_.records.back().begin + kHeaderSize));
    Auxtrace a;
    a.size = r.Get<uint64_t>();
    a.offset = r.Get<uint64_t>();
    a.reference = r.Get<uint64_t>();
    a.idx = r.Get<uint32_t>();
    a.tid = r.Get<uint32_t>();
    a.cpu = r.Get<uint32_t>();
    a.record_offset = record_offset;
    a.data_offset = pos;
    a.available = std::min(a.size, end - pos);
    out_.auxtrace.push_back(a);
    if (a.available < a.size) {
      AddDamage(pos + a.available, a.size - a.available,
                absl::StrCat("AUXTRACE trace bytes cut: cpu ", static_cast<int32_t>(a.cpu), " has ",
                             a.available, " of ", a.size, " bytes"));
      return absl::OkStatus();
    }
    pos += a.size;
  }
  if (!pending_.empty()) {
    AddDamage(
        end, pending_.size(),
        absl::StrCat(pending_.size(), " decompressed bytes at the end are not a whole record"));
  }
  return absl::OkStatus();
}

void Parser::AddRecord(std::span<const uint8_t> bytes, uint64_t offset, bool in_compressed) {
  PerfRecordRef ref;
  const auto hdr = Load<perf_event_header>(bytes.data());
  ref.type = hdr.type;
  ref.misc = hdr.misc;
  ref.offset = offset;
  ref.in_compressed = in_compressed;
  ref.begin = out_.record_bytes.size();
  ref.size = static_cast<uint32_t>(bytes.size());
  out_.record_bytes.insert(out_.record_bytes.end(), bytes.begin(), bytes.end());
  out_.records.push_back(ref);
  // The record's own copy: `bytes` may be the decompression buffer or the window.
  const PerfRecordRef& back = out_.records.back();
  RecordView v{back.type, back.misc,
               std::span<const uint8_t>(out_.record_bytes).subspan(back.begin, back.size)};
  Handle(v, offset, in_compressed);
}

void Parser::Handle(const RecordView& r, uint64_t offset, bool in_compressed) {
  ByteReader b(r.body());
  switch (r.type) {
    case kRecordHeaderAttr: {
      PerfAttr a;
      bool ok;
      ParseAttr(r.body(), offset, a, ok);
      if (!ok) return;
      const uint64_t attr_bytes = a.raw.size();
      b.GetBytes(attr_bytes);
      while (b.remaining() >= 8) a.ids.push_back(b.Get<uint64_t>());
      for (uint64_t id : a.ids) out_.attr_of_id.emplace(id, out_.attrs.size());
      out_.attrs.push_back(std::move(a));
      return;
    }
    case kRecordHeaderFeature: {
      const uint64_t id = b.Get<uint64_t>();
      if (!b.ok()) return AddDamage(offset, r.bytes.size(), "HEADER_FEATURE record cut");
      if (id > 255) {
        out_.warnings.push_back(absl::StrCat("HEADER_FEATURE at ", offset, ": feature id ", id));
        return;
      }
      const std::span<const uint8_t> section = b.Rest();
      // perf ends the features with an empty one of id HEADER_LAST_FEATURE (32 in perf 6.1,
      // more in later perf): a mark, not a feature.
      if (section.empty() && id > kFeatPmuCaps) return;
      out_.features.present.push_back(static_cast<uint32_t>(id));
      ParseFeature(static_cast<uint32_t>(id), section, offset + 16);
      Keep(static_cast<uint32_t>(id), std::vector<uint8_t>(section.begin(), section.end()));
      return;
    }
    case kRecordHeaderBuildId:
      return ParseBuildIds(r.bytes, offset);
    case kRecordAuxtraceInfo: {
      AuxtraceInfo info;
      info.type = b.Get<uint32_t>();
      b.Get<uint32_t>();
      if (!b.ok()) return AddDamage(offset, r.bytes.size(), "AUXTRACE_INFO record cut");
      while (b.remaining() >= 8) info.priv.push_back(b.Get<uint64_t>());
      out_.auxtrace_info.push_back(std::move(info));
      return;
    }
    case kRecordTimeConv: {
      TimeConv t;
      t.time_shift = b.Get<uint64_t>();
      t.time_mult = b.Get<uint64_t>();
      t.time_zero = b.Get<uint64_t>();
      if (!b.ok()) return AddDamage(offset, r.bytes.size(), "TIME_CONV record cut");
      if (b.remaining() >= 24) {
        t.extended = true;
        t.time_cycles = b.Get<uint64_t>();
        t.time_mask = b.Get<uint64_t>();
        t.cap_user_time_zero = b.Get<uint8_t>() != 0;
        t.cap_user_time_short = b.Get<uint8_t>() != 0;
      }
      out_.time_conv = t;
      return;
    }
    case kRecordIdIndex: {
      uint64_t n = b.Get<uint64_t>();
      if (!b.ok()) return AddDamage(offset, r.bytes.size(), "ID_INDEX record cut");
      if (n > b.remaining() / 32) {
        AddDamage(offset, r.bytes.size(),
                  absl::StrCat("ID_INDEX claims ", n, " entries, its ", r.bytes.size(),
                               " bytes hold ", b.remaining() / 32));
        n = b.remaining() / 32;
      }
      for (uint64_t i = 0; i < n; ++i) {
        IdIndexEntry e;
        e.id = b.Get<uint64_t>();
        e.idx = b.Get<uint64_t>();
        e.cpu = b.Get<uint64_t>();
        e.tid = b.Get<uint64_t>();
        out_.id_index.push_back(e);
      }
      return;
    }
    case kRecordAuxtrace:
      if (in_compressed) {
        AddDamage(offset, r.bytes.size(),
                  "AUXTRACE record inside COMPRESSED: its trace bytes cannot be located");
      }
      return;
    case kRecordCompressed:
      if (in_compressed) {
        return AddDamage(offset, r.bytes.size(), "COMPRESSED record inside COMPRESSED");
      }
      {
        // Decompress adds records, which moves record_bytes under `r`.
        const std::vector<uint8_t> copy(r.bytes.begin(), r.bytes.end());
        return Decompress(RecordView{r.type, r.misc, copy}, offset);
      }
    default:
      return;
  }
}

void Parser::Decompress(const RecordView& r, uint64_t offset) {
  if (!dctx_) {
    dctx_.reset(ZSTD_createDCtx());
    if (!dctx_) return AddDamage(offset, r.bytes.size(), "cannot allocate a zstd context");
  }
  const uint64_t limit = std::max<uint64_t>(kMaxDecompressedBytes, 64 * out_.file_size);
  std::span<const uint8_t> in = r.body();
  ZSTD_inBuffer zin{in.data(), in.size(), 0};
  std::vector<uint8_t> chunk(ZSTD_DStreamOutSize());
  uint64_t produced = 0;
  while (zin.pos < zin.size) {
    ZSTD_outBuffer zout{chunk.data(), chunk.size(), 0};
    const size_t rc = ZSTD_decompressStream(dctx_.get(), &zout, &zin);
    if (ZSTD_isError(rc)) {
      AddDamage(offset, r.bytes.size(),
                absl::StrCat("COMPRESSED record: zstd: ", ZSTD_getErrorName(rc)));
      ZSTD_DCtx_reset(dctx_.get(), ZSTD_reset_session_only);
      pending_.clear();
      return;
    }
    produced += zout.pos;
    decompressed_total_ += zout.pos;
    if (produced > kMaxDecompressedBytes || decompressed_total_ > limit) {
      AddDamage(offset, r.bytes.size(),
                absl::StrCat("COMPRESSED record decompresses to more than ",
                             std::min(kMaxDecompressedBytes, limit), " bytes: dropped"));
      ZSTD_DCtx_reset(dctx_.get(), ZSTD_reset_session_only);
      pending_.clear();
      return;
    }
    pending_.insert(pending_.end(), chunk.begin(), chunk.begin() + zout.pos);
    if (zout.pos == 0 && rc != 0 && zin.pos == zin.size) break;
  }
  // Whole records go out; a record split across COMPRESSED records waits in pending_.
  size_t at = 0;
  while (pending_.size() - at >= kHeaderSize) {
    const auto hdr = Load<perf_event_header>(pending_.data() + at);
    if (hdr.size < kHeaderSize) {
      AddDamage(offset, r.bytes.size(),
                absl::StrCat("decompressed record size ", hdr.size,
                             " is below 8: ", pending_.size() - at, " decompressed bytes dropped"));
      pending_.clear();
      return;
    }
    if (hdr.size > pending_.size() - at) break;
    const std::vector<uint8_t> rec(pending_.begin() + at, pending_.begin() + at + hdr.size);
    at += hdr.size;
    AddRecord(rec, offset, true);
  }
  pending_.erase(pending_.begin(), pending_.begin() + at);
}

}  // namespace

std::string PerfStatsName(uint32_t type) {
  switch (type) {
    case kRecordHeaderAttr:
      return "ATTR";
    case kRecordHeaderEventType:
      return "EVENT_TYPE";
    case kRecordHeaderTracingData:
      return "TRACING_DATA";
    case kRecordHeaderBuildId:
      return "BUILD_ID";
    case kRecordFinishedRound:
      return "FINISHED_ROUND";
    case kRecordIdIndex:
      return "ID_INDEX";
    case kRecordAuxtraceInfo:
      return "AUXTRACE_INFO";
    case kRecordAuxtrace:
      return "AUXTRACE";
    case kRecordAuxtraceError:
      return "AUXTRACE_ERROR";
    case kRecordThreadMap:
      return "THREAD_MAP";
    case kRecordCpuMap:
      return "CPU_MAP";
    case kRecordStatConfig:
      return "STAT_CONFIG";
    case kRecordStat:
      return "STAT";
    case kRecordStatRound:
      return "STAT_ROUND";
    case kRecordEventUpdate:
      return "EVENT_UPDATE";
    case kRecordTimeConv:
      return "TIME_CONV";
    case kRecordHeaderFeature:
      return "FEATURE";
    case kRecordCompressed:
      return "COMPRESSED";
    case kRecordFinishedInit:
      return "FINISHED_INIT";
    default:
      if (type >= PERF_RECORD_MAX) return absl::StrCat("type-", type);
      return absl::AsciiStrToUpper(RecordTypeName(type));
  }
}

std::string PerfFeatureName(uint32_t id) {
  // tools/perf/util/header.h's HEADER_* after its prefix, by number.
  static constexpr const char* kNames[] = {
      "RESERVED",        "TRACING_DATA", "BUILD_ID",     "HOSTNAME",     "OSRELEASE",
      "VERSION",         "ARCH",         "NRCPUS",       "CPUDESC",      "CPUID",
      "TOTAL_MEM",       "CMDLINE",      "EVENT_DESC",   "CPU_TOPOLOGY", "NUMA_TOPOLOGY",
      "BRANCH_STACK",    "PMU_MAPPINGS", "GROUP_DESC",   "AUXTRACE",     "STAT",
      "CACHE",           "SAMPLE_TIME",  "MEM_TOPOLOGY", "CLOCKID",      "DIR_FORMAT",
      "BPF_PROG_INFO",   "BPF_BTF",      "COMPRESSED",   "CPU_PMU_CAPS", "CLOCK_DATA",
      "HYBRID_TOPOLOGY", "PMU_CAPS"};
  if (id < std::size(kNames)) return kNames[id];
  return absl::StrCat("feature-", id);
}

bool KeptAsBytes(uint32_t id) {
  switch (id) {
    case kFeatTracingData:
    case kFeatNrCpus:
    case kFeatTotalMem:
    case kFeatCpuTopology:
    case kFeatNumaTopology:
    case kFeatBranchStack:
    case kFeatPmuMappings:
    case kFeatCache:
    case kFeatSampleTime:
    case kFeatMemTopology:
    case kFeatClockId:
    case kFeatBpfProgInfo:
    case kFeatBpfBtf:
    case kFeatCpuPmuCaps:
    case kFeatClockData:
    case kFeatHybridTopology:
    case kFeatPmuCaps:
      return true;
    default:
      return false;
  }
}

bool IsPerfData(std::span<const uint8_t> bytes) {
  return bytes.size() >= 8 && std::memcmp(bytes.data(), kMagic, 8) == 0;
}

RecordView PerfData::View(size_t i) const {
  const PerfRecordRef& r = records[i];
  return RecordView{r.type, r.misc,
                    std::span<const uint8_t>(record_bytes).subspan(r.begin, r.size)};
}

std::map<uint32_t, uint64_t> PerfData::CountByType() const {
  std::map<uint32_t, uint64_t> n;
  for (const PerfRecordRef& r : records) ++n[r.type];
  return n;
}

std::optional<uint64_t> RecordSampleId(const RecordView& r, uint64_t st, bool sample_id_all) {
  std::span<const uint8_t> body = r.body();
  auto at = [&](size_t off) -> std::optional<uint64_t> {
    if (off + 8 > body.size()) return std::nullopt;
    return Load<uint64_t>(body.data() + off);
  };
  if (r.type == PERF_RECORD_SAMPLE) {
    if (st & PERF_SAMPLE_IDENTIFIER) return at(0);
    if (st & PERF_SAMPLE_ID) {
      const int before = std::popcount(
          st & (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR));
      return at(8 * before);
    }
  } else if (sample_id_all && r.type < PERF_RECORD_MAX) {
    if (st & PERF_SAMPLE_IDENTIFIER) {
      if (body.size() >= 8) return at(body.size() - 8);
    } else if (st & PERF_SAMPLE_ID) {
      const size_t after = 1 + std::popcount(st & (PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU));
      if (body.size() >= 8 * after) return at(body.size() - 8 * after);
    }
  }
  return std::nullopt;
}

const PerfAttr* PerfData::AttrOf(const RecordView& r) const {
  if (attrs.empty()) return nullptr;
  if (attrs.size() == 1) return &attrs[0];
  // As perf's evlist__event2evsel: every attr puts the id at the same place (perf checks), so
  // the first one's sample_type says where.
  const perf_event_attr& a = attrs[0].attr;
  if (r.type != PERF_RECORD_SAMPLE && !a.sample_id_all) return &attrs[0];
  const std::optional<uint64_t> id = RecordSampleId(r, a.sample_type, a.sample_id_all);
  if (!id) return nullptr;
  if (*id == 0) return &attrs[0];  // perf synthesizes records with a zero id
  auto it = attr_of_id.find(*id);
  return it == attr_of_id.end() ? nullptr : &attrs[it->second];
}

std::string PerfData::NameOf(size_t i) const {
  const std::vector<EventDescEntry>& desc = features.event_desc;
  if (i >= attrs.size()) return "";
  for (const EventDescEntry& e : desc) {
    if (!e.ids.empty() && !attrs[i].ids.empty() && e.ids.front() == attrs[i].ids.front()) {
      return e.name;
    }
  }
  return i < desc.size() && desc[i].ids.empty() ? desc[i].name : "";
}

absl::StatusOr<PerfData> ReadPerfData(ByteSource& source) {
  PerfData out;
  Parser p(source, out);
  PTKIT_RETURN_IF_ERROR(p.Run());
  return out;
}

absl::StatusOr<std::vector<uint8_t>> ReadAuxtraceData(ByteSource& source, const Auxtrace& a) {
  std::vector<uint8_t> out;
  const uint64_t size = source.size();
  if (a.data_offset > size) return out;
  out.resize(static_cast<size_t>(std::min(a.available, size - a.data_offset)));
  absl::StatusOr<size_t> got = source.ReadAt(a.data_offset, out);
  if (!got.ok()) return got.status();
  out.resize(*got);
  return out;
}

}  // namespace ptkit::perf
