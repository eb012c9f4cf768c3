// AUX samples of an emulated recording against its ground truth: the k-th sample of a thread
// is taken before its (k*N)-th instruction retires, so its IP is that instruction, and the
// instructions its snippet decodes to are exactly the ones the thread ran just before, ending
// there (both emulation backends take them so).
#ifndef PTKIT_TESTS_SUPPORT_AUX_SAMPLES_H_
#define PTKIT_TESTS_SUPPORT_AUX_SAMPLES_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ptkit::testing {

// Checks `ptdecode samples --json --instructions --branches 0` output `j` (every sample of
// `snippet_bytes`, synchronised, reaching its IP) against `truth` sampled every `period`
// instructions per thread. Sets the number of samples and the longest snippet (instructions).
inline void ExpectSamplesMatchTruth(const nlohmann::json& j, const PerThread& truth,
                                    uint64_t period, uint64_t snippet_bytes, uint64_t* total,
                                    size_t* longest) {
  *total = 0;
  *longest = 0;
  for (const auto& [tid, ips] : truth) *total += ips.size() / period;
  ASSERT_EQ(j["samples"].size(), *total);
  EXPECT_EQ(j["totals"]["unsynced"], 0);
  EXPECT_EQ(j["totals"]["not_reached"], 0);
  std::map<uint64_t, uint64_t> seen;  // tid -> samples so far
  for (const nlohmann::json& s : j["samples"]) {
    const uint64_t tid = s["tid"];
    ASSERT_TRUE(truth.contains(tid)) << tid;
    const std::vector<uint64_t>& ran = truth.at(tid);
    const uint64_t k = ++seen[tid];
    const size_t at = k * period - 1;  // the instruction about to retire
    ASSERT_LT(at, ran.size());
    EXPECT_EQ(s["ip"].get<uint64_t>(), ran[at]) << "tid " << tid << " sample " << k;
    EXPECT_EQ(s["snippet_bytes"], snippet_bytes);
    ASSERT_EQ(s["synced"], true);
    ASSERT_EQ(s["reaches_ip"], true);
    const std::vector<uint64_t> insns = s["insns"];
    ASSERT_FALSE(insns.empty());
    ASSERT_LE(insns.size(), at + 1);
    const std::vector<uint64_t> want(ran.begin() + static_cast<ptrdiff_t>(at + 1 - insns.size()),
                                     ran.begin() + static_cast<ptrdiff_t>(at + 1));
    EXPECT_EQ(insns, want) << "tid " << tid << " sample " << k;
    // Taken branches: the truth's non-sequential steps within the snippet, in order.
    EXPECT_EQ(s["taken_branches"], s["branches"].size());
    for (const nlohmann::json& b : s["branches"]) {
      auto from = std::find(insns.begin(), insns.end(), b["from"].get<uint64_t>());
      ASSERT_NE(from, insns.end());
    }
    *longest = std::max(*longest, insns.size());
  }
  for (const auto& [tid, ips] : truth) EXPECT_EQ(seen[tid], ips.size() / period) << tid;
}

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_AUX_SAMPLES_H_
