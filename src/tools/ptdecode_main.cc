// ptdecode: turns a trace.pt recording into control flow and summaries.
// Thin main: flags are parsed here, the work happens in ptkit libraries.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "ptkit/info.h"

namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ptdecode: %s\n", std::string(status.message()).c_str());
  return kExitRuntime;
}

int RunInfo(const std::string& path, bool json) {
  auto info = ptkit::ContainerInfo(path);
  if (!info.ok()) return Fail(info.status());
  std::string text = json ? info->dump(2) + "\n" : ptkit::FormatInfoText(*info);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ptdecode: decode Intel PT recordings (trace.pt) into control flow", "ptdecode"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ptdecode " PTKIT_VERSION);
  int exit_code = 0;

  std::string info_path;
  bool info_json = false;
  CLI::App* info = app.add_subcommand(
      "info", "Show metadata, record counts and bytes, streams, loss and damage of a trace.pt");
  info->add_option("FILE", info_path, "trace.pt file")->required();
  info->add_flag("--json", info_json, "Print JSON (schema in ptdecode(1))");
  info->callback([&] { exit_code = RunInfo(info_path, info_json); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ptdecode: %s (see ptdecode --help)\n", e.what());
    return kExitUsage;
  }
  return exit_code;
}
