// SPDX-License-Identifier: Apache-2.0
//
// ptrecord's answers to the QEMU plugin's questions about pids (qemu_ring.h: QemuPidQuestion):
// where a guest process or thread of another pid namespace is in ptrecord's, read from
// ptrecord's /proc. A task's /proc/PID/status has its pid in every pid namespace from the /proc
// mount's down to its own ("NSpid:"), and /proc/PID/ns/pid names its own namespace.
#ifndef PTKIT_RECORD_EMULATE_GUEST_PIDS_H_
#define PTKIT_RECORD_EMULATE_GUEST_PIDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "record/emulate/qemu_ring.h"

namespace ptkit::emulate {

// The "NSpid:" line of a /proc/PID/status text: the task's pid in each pid namespace from the
// /proc mount's down to its own, outermost first. Empty when there is none (Linux before 4.1).
// Pure.
std::vector<uint32_t> ParseNsPids(std::string_view status);

// The "PPid:" line of a /proc/PID/status text; nullopt when there is none. Pure.
std::optional<uint32_t> ParseParentPid(std::string_view status);

// The inode of a namespace link's target, "pid:[4026531836]"; 0 when it is not one. Pure.
uint64_t ParseNamespaceLink(std::string_view target);

// Whether the /proc mounted at `proc_root` has the pids of the caller's pid namespace (its "self"
// is getpid()): not where ptrecord runs in a pid namespace of its own with the host's /proc.
bool ProcHasOwnPids(const std::string& proc_root = "/proc");

// The answer to `q` from the /proc mounted at `proc_root` (ptrecord's; empty: none, nothing is
// found). kAskThread: the process
// whose ns/pid is namespace q.pidns and whose last NSpid is q.ns_pid (process q.hint when it is
// that one, else any), and its thread whose last NSpid is q.ns_tid. kAskChild: the child of
// process q.hint whose pid in q.hint's namespace is q.ns_pid. Zeros when there is none (the task
// is gone, q.pidns is 0, or the /proc is not of ptrecord's pid namespace).
QemuPidAnswer AnswerPidQuestion(const QemuPidQuestion& q, const std::string& proc_root = "/proc");

// Answers the question waiting in each of the first `slots` slots of the region at `base`, if
// any (AnswerPids), from the /proc at `proc_root`.
void AnswerPidQuestions(uint8_t* base, uint32_t slots, const std::string& proc_root = "/proc");

}  // namespace ptkit::emulate

#endif  // PTKIT_RECORD_EMULATE_GUEST_PIDS_H_
