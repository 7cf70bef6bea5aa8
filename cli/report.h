// Reports a CI system reads, for `run`, `verify` and `diff`: one Report (a
// list of test cases: a save x load pair, a topology, a key) written as
// JSON (--report), JUnit XML (--junit; one <testcase> per case, a <failure>
// with the reason for each failing one; Jenkins and GitLab parse it) and
// Markdown (--markdown; a summary line and a table a PR comment can show).
//
// Thread-safety: pure functions; writers touch only their own file.
#ifndef DISTCKPT_CLI_REPORT_H_
#define DISTCKPT_CLI_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace distckpt {

struct ReportCase {
  std::string group;  // JUnit classname: "distckpt.run.<scenario>", ...
  std::string name;   // "tp=2 -> tp=4", a topology, a key
  bool ok = false;
  std::string message;  // the reason (failure) or a note
  double seconds = 0;
  nlohmann::json details;  // extra fields of the JSON report
};

struct Report {
  std::string command;  // "run", "verify", "diff"
  std::string title;    // one line: what was checked
  std::vector<ReportCase> cases;
  nlohmann::json extra;  // extra top-level fields of the JSON report (object or null)

  size_t failures() const;
};

struct ReportPaths {
  std::string json, junit, markdown;  // "" = not written
};

nlohmann::json ReportToJson(const Report& report);
std::string ReportToJunit(const Report& report);
std::string ReportToMarkdown(const Report& report);
// Writes each requested form; CheckpointError(kIo) naming the path on failure.
void WriteReports(const ReportPaths& paths, const Report& report);

}  // namespace distckpt

#endif  // DISTCKPT_CLI_REPORT_H_
