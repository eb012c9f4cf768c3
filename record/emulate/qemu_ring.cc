// SPDX-License-Identifier: Apache-2.0
#include "record/emulate/qemu_ring.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ptkit/status.h"

namespace ptkit::emulate {

uint64_t QemuRegionSize(uint32_t slots, uint64_t data_pages, uint64_t aux_pages) {
  return kQemuPage + uint64_t{slots} * (2 + data_pages + aux_pages) * kQemuPage;
}

void InitQemuRegion(uint8_t* base, uint32_t slots, uint64_t data_pages, uint64_t aux_pages) {
  QemuRegionHeader* h = RegionHeader(base);
  h->magic = kQemuRegionMagic;
  h->version = kQemuRegionVersion;
  h->slot_count = slots;
  h->slot_size = (2 + data_pages + aux_pages) * kQemuPage;
  h->data_size = data_pages * kQemuPage;
  h->aux_size = aux_pages * kQemuPage;
  for (uint32_t s = 0; s < slots; ++s) {
    // The user-page fields the kernel fills (perf_mmap(), rb_alloc_aux()), offsets from the
    // user page as in a perf mmap.
    auto* up =
        reinterpret_cast<perf_event_mmap_page*>(base + kQemuPage + s * h->slot_size + kQemuPage);
    up->data_offset = kQemuPage;
    up->data_size = h->data_size;
    up->aux_offset = up->data_offset + up->data_size;
    up->aux_size = h->aux_size;
  }
}

absl::Status HoldReaderAlive(QemuRegionHeader& h) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  int e = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (e == 0) e = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (e == 0) e = pthread_mutex_init(&h.reader_alive, &attr);
  pthread_mutexattr_destroy(&attr);
  if (e == 0) e = pthread_mutex_lock(&h.reader_alive);
  if (e != 0) return ErrnoStatus(e, "make the QEMU ring's liveness lock");
  return absl::OkStatus();
}

void ReleaseReaderAlive(QemuRegionHeader& h) { pthread_mutex_unlock(&h.reader_alive); }

// EBUSY: ptrecord holds it. 0 (released at the run's end), EOWNERDEAD (ptrecord died holding
// it; made consistent and released, so that every other waiter gets 0 too) or
// ENOTRECOVERABLE: gone. A waiter that took it in passing makes another's trylock EBUSY for
// that moment: that one looks again at its next wait.
bool ReaderGone(QemuRegionHeader& h) {
  const int e = pthread_mutex_trylock(&h.reader_alive);
  if (e == EBUSY) return false;
  if (e == EOWNERDEAD) pthread_mutex_consistent(&h.reader_alive);
  if (e == 0 || e == EOWNERDEAD) pthread_mutex_unlock(&h.reader_alive);
  return true;
}

absl::Status CheckQemuRegion(const uint8_t* base, uint64_t size) {
  const auto* h = reinterpret_cast<const QemuRegionHeader*>(base);
  if (size < kQemuPage || h->magic != kQemuRegionMagic || h->version != kQemuRegionVersion) {
    return absl::FailedPreconditionError(
        "the shared region is not a ptkit QEMU ring of this version (plugin and ptrecord from "
        "different builds?)");
  }
  if (!record::IsPowerOfTwo(h->data_size) || !record::IsPowerOfTwo(h->aux_size) ||
      h->slot_size != 2 * kQemuPage + h->data_size + h->aux_size ||
      QemuRegionSize(h->slot_count, h->data_size / kQemuPage, h->aux_size / kQemuPage) > size) {
    return absl::FailedPreconditionError(
        absl::StrCat("the shared region's layout does not fit its ", size, " bytes"));
  }
  return absl::OkStatus();
}

record::RingView SlotRing(uint8_t* base, uint32_t slot) {
  uint8_t* const page = reinterpret_cast<uint8_t*>(SlotControl(base, slot)) + kQemuPage;
  auto* up = reinterpret_cast<perf_event_mmap_page*>(page);
  record::RingView v;
  v.page = up;
  v.data = std::span<uint8_t>(page + up->data_offset, up->data_size);
  v.aux = std::span<uint8_t>(page + up->aux_offset, up->aux_size);
  v.aux_overwrite = RegionHeader(base)->overwrite != 0;
  return v;
}

namespace {

sockaddr_un RingSocketAddress(const std::string& name, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(address.sun_path) - 1);
  std::memcpy(address.sun_path + 1, name.data(), n);  // sun_path[0] = 0: abstract
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return address;
}

// One byte with room for one descriptor (SCM_RIGHTS), to send or receive.
struct FdMessage {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{.msg_name = nullptr,
             .msg_namelen = 0,
             .msg_iov = &iov,
             .msg_iovlen = 1,
             .msg_control = control,
             .msg_controllen = sizeof(control),
             .msg_flags = 0};
  FdMessage() = default;
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

}  // namespace

std::string RingSocketName() {
  uint64_t random = 0;
  if (getrandom(&random, sizeof(random), 0) != sizeof(random)) {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    random =
        static_cast<uint64_t>(ts.tv_nsec) * 0x9e3779b97f4a7c15u ^ static_cast<uint64_t>(ts.tv_sec);
  }
  return absl::StrCat("ptkit-ring-", getpid(), "-", absl::Hex(random, absl::kZeroPad16));
}

int ListenRingSocket(const std::string& name) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  socklen_t length = 0;
  const sockaddr_un address = RingSocketAddress(name, length);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 || listen(fd, 16) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

void ServeRingSocket(int listen_fd, int memfd) {
  // At most 16 a pass: connections of other users (anyone can see the name in /proc/net/unix)
  // must not hold up the drain (review 39 L1); the rest wait for the next pass.
  for (int served = 0; served < 16; ++served) {
    const int conn = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) return;  // EAGAIN: nobody waits
    ucred peer{};
    socklen_t size = sizeof(peer);
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0 && peer.uid == geteuid()) {
      FdMessage m;
      cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &memfd, sizeof(int));
      (void)sendmsg(conn, &m.msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    close(conn);  // another user's connection gets nothing (EOF)
  }
}

int ReceiveRingFd(const std::string& name, bool (*wait)()) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  socklen_t length = 0;
  const sockaddr_un address = RingSocketAddress(name, length);
  int received = -1;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), length) == 0) {
    for (;;) {  // ptrecord answers after its next drain pass
      pollfd p{fd, POLLIN, 0};
      const int ready = poll(&p, 1, 10);
      if (ready < 0 && errno != EINTR) break;
      if (ready <= 0) {
        if (!wait()) break;
        continue;
      }
      FdMessage m;
      if (recvmsg(fd, &m.msg, MSG_CMSG_CLOEXEC) > 0) {
        for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg); c != nullptr; c = CMSG_NXTHDR(&m.msg, c)) {
          if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            std::memcpy(&received, CMSG_DATA(c), sizeof(int));
          }
        }
      }
      break;
    }
  }
  close(fd);
  return received;
}

bool LockSlotForReading(QemuSlotControl& c, uint64_t timeout_ns) {
  c.reading.store(1);
  for (uint64_t waited = 0; c.writing.load() != 0; waited += 20000) {
    if (waited >= timeout_ns) return false;
    timespec ts{0, 20000};
    nanosleep(&ts, nullptr);
  }
  return true;
}

void QemuSlotWriter::Resume(uint64_t recorded) {
  aux_head_ = record::LoadAuxHead(ring_.page);
  recorded_ = overwrite_ ? aux_head_ : std::min(recorded, aux_head_);
  data_head_ = record::LoadDataHead(ring_.page);
}

bool QemuSlotWriter::StageTrace(std::span<const uint8_t> bytes) {
  if (overwrite_) return false;
  const uint64_t tail = record::LoadAuxTail(ring_.page);
  if (staged() + bytes.size() > ring_.aux.size() / 4 ||
      aux_head_ + bytes.size() - tail > ring_.aux.size()) {
    return false;
  }
  record::CopyToRing(ring_.aux, aux_head_, bytes);
  aux_head_ += bytes.size();
  record::StoreAuxHead(ring_.page, aux_head_);
  return true;
}

void QemuSlotWriter::CopyNewest(std::span<uint8_t> out) const {
  record::CopyFromRing(ring_.aux, aux_head_ - out.size(), out);
}

perf::SampleId QemuSlotWriter::Sample(uint64_t time) const {
  perf::SampleId s;
  s.has_tid = s.has_time = s.has_cpu = s.has_id = true;
  s.pid = pid_;
  s.tid = tid_;
  s.time = time;
  s.cpu = 0;
  s.id = id_;
  return s;
}

// kernel/events/ring_buffer.c: the producer checks the free space against data_tail (read
// with acquire: the reader is done with those bytes), writes, then publishes data_head with
// release.
bool QemuSlotWriter::TryWriteRecord(std::span<const uint8_t> record) {
  const uint64_t tail = record::LoadDataTail(ring_.page);
  if (data_head_ + record.size() - tail > ring_.data.size()) return false;
  record::CopyToRing(ring_.data, data_head_, record);
  data_head_ += record.size();
  record::StoreDataHead(ring_.page, data_head_);
  return true;
}

// Full-trace mode (AUX mapped writable): never past aux_tail; the bytes are published with
// aux_head, then described by a PERF_RECORD_AUX (perf_aux_output_end()). Overwrite mode:
// the ring wraps (only its last ring-size bytes of a longer write survive) and the record
// says OVERWRITE with the new head as its offset, as the kernel's in perf_aux_output_end()
// with a free-running head (record/sim_pmu.cc does the same).
bool QemuSlotWriter::TryWriteTrace(std::span<const uint8_t> bytes, uint64_t time) {
  const uint64_t tail = record::LoadAuxTail(ring_.page);
  if (!overwrite_ && aux_head_ + bytes.size() - tail > ring_.aux.size()) return false;
  perf::Aux aux;
  aux.aux_offset = overwrite_ ? aux_head_ + bytes.size() : recorded_;
  aux.aux_size = staged() + bytes.size();
  aux.flags = overwrite_ ? PERF_AUX_FLAG_OVERWRITE : 0;
  aux.sample_id = Sample(time);
  const std::vector<uint8_t> record = perf::EncodeAux(aux, QemuSampleLayout());
  const uint64_t data_tail = record::LoadDataTail(ring_.page);
  if (data_head_ + record.size() - data_tail > ring_.data.size()) return false;
  const std::span<const uint8_t> kept =
      bytes.size() > ring_.aux.size() ? bytes.last(ring_.aux.size()) : bytes;
  record::CopyToRing(ring_.aux, aux_head_ + (bytes.size() - kept.size()), kept);
  aux_head_ += bytes.size();
  record::StoreAuxHead(ring_.page, aux_head_);
  if (!TryWriteRecord(record)) return false;
  recorded_ = aux_head_;
  return true;
}

}  // namespace ptkit::emulate
