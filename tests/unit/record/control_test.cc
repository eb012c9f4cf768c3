// --control fifo:CTL[,ACK]: real named pipes, the drain loop over a simulated PMU, and a
// script's side played by a thread: every command is acted on and acknowledged in order.
#include "record/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "ptkit/status.h"
#include "record/drain.h"
#include "record/drain_loop.h"
#include "record/sim_pmu.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ControlSpecTest, ParsesPerfsFifoForm) {
  PTKIT_ASSERT_OK_AND_ASSIGN(ControlSpec s, ParseControlSpec("fifo:/tmp/ctl,/tmp/ack"));
  EXPECT_EQ(s.ctl, "/tmp/ctl");
  EXPECT_EQ(s.ack, "/tmp/ack");
  PTKIT_ASSERT_OK_AND_ASSIGN(s, ParseControlSpec("fifo:ctl"));
  EXPECT_EQ(s.ctl, "ctl");
  EXPECT_EQ(s.ack, "");
  for (const char* bad : {"fd:3,4", "fifo:", "ctl", "fifo:ctl,"}) {
    EXPECT_THAT(ParseControlSpec(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fifo:CTL[,ACK]")))
        << bad;
  }
  EXPECT_THAT(ParseControlCommand(" stop "), IsOk());
  EXPECT_THAT(ParseControlCommand("halt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("known: enable")));
}

TEST(ControlChannelTest, RefusesWhatIsNotAFifo) {
  ::ptkit::testing::TempDir dir;
  const std::string file = dir.File("plain");
  close(open(file.c_str(), O_CREAT | O_WRONLY, 0600));
  EXPECT_THAT(ControlChannel::Open({file, ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mkfifo")));
  EXPECT_FALSE(ControlChannel::Open({dir.File("missing"), ""}).ok());
}

// Reads one line from `fd` (blocking up to 10 s).
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (line.empty() || line.back() != '\n') {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1 || read(fd, &c, 1) != 1) return line + "<timeout>";
    line.push_back(c);
  }
  return line;
}

TEST(ControlLoopTest, CommandsAreActedOnAndAcknowledged) {
  SignalWatcher signals;  // before any thread starts
  ::ptkit::testing::TempDir dir;
  const std::string ctl = dir.File("ctl"), ack = dir.File("ack");
  ASSERT_EQ(mkfifo(ctl.c_str(), 0600), 0);
  ASSERT_EQ(mkfifo(ack.c_str(), 0600), 0);
  PTKIT_ASSERT_OK_AND_ASSIGN(ControlChannel channel, ControlChannel::Open({ctl, ack}));
  PTKIT_ASSERT_OK_AND_ASSIGN(
      auto sim, SimulatedPmu::Create({.data_pages = 8, .aux_pages = 16, .overwrite = true}));
  WriterOptions wo;
  PTKIT_ASSERT_OK_AND_ASSIGN(auto writer, ContainerWriter::Create(dir.File("trace.pt"), wo));
  Drainer drainer(writer.get());

  std::vector<std::string> notices;
  std::vector<bool> enabled_after;  // the AUX event's state after each acked command
  std::thread script([&] {
    const int w = open(ctl.c_str(), O_WRONLY);
    const int r = open(ack.c_str(), O_RDONLY);
    // The commands one by one (a script waits for each ack); "snap" and "shot" split across
    // writes, as a pipe may deliver them.
    for (const char* cmd : {"ping\n", "disable\n", "enable\n", "snap", "shot\n", "bogus\n"}) {
      ASSERT_GT(write(w, cmd, strlen(cmd)), 0);
      if (std::string(cmd).back() != '\n') continue;
      EXPECT_EQ(ReadLine(r), "ack\n") << cmd;
      enabled_after.push_back(sim->enabled());
    }
    ASSERT_GT(write(w, "stop\n", 5), 0);
    EXPECT_EQ(ReadLine(r), "ack\n");
    close(w);
    close(r);
  });
  LoopOptions lo;
  lo.snapshot_mode = true;
  lo.poll_timeout_ms = 5000;  // only the FIFO wakes the loop
  lo.control = &channel;
  lo.notice = [&](const std::string& n) { notices.push_back(n); };
  TraceSource* sources[] = {sim.get()};
  absl::StatusOr<LoopResult> result = RunDrainLoop(sources, drainer, signals, lo);
  script.join();
  ASSERT_THAT(result, IsOk());
  EXPECT_TRUE(result->stopped_by_control);
  EXPECT_FALSE(result->stopped_by_signal);
  EXPECT_EQ(result->control_commands, 6u);
  EXPECT_THAT(enabled_after, ::testing::ElementsAre(true, false, true, true, true));
  // The snapshot command, then the final one.
  EXPECT_EQ(result->snapshots, 2u);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_THAT(notices[0], HasSubstr("unknown control command 'bogus'"));
  EXPECT_THAT(writer->Close(), IsOk());
}

}  // namespace
}  // namespace ptkit::record
