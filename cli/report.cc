#include "cli/report.h"

#include <fmt/format.h>

#include <fstream>

#include "core/error.h"

namespace distckpt {
namespace {

// XML 1.0 text / attribute value: markup characters escaped, control
// characters other than tab / newline (not allowed in XML 1.0) replaced.
std::string XmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

// A Markdown table cell: one line, pipes escaped, long reasons cut.
std::string MarkdownCell(std::string s, size_t max = 200) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (s.size() > max) s = s.substr(0, max) + "...";
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else
      out += c;
  }
  return out;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) Fail(ErrorKind::kIo, "cannot write report {}", path);
}

}  // namespace

size_t Report::failures() const {
  size_t n = 0;
  for (const ReportCase& c : cases) n += !c.ok;
  return n;
}

nlohmann::json ReportToJson(const Report& report) {
  nlohmann::json cases = nlohmann::json::array();
  for (const ReportCase& c : report.cases) {
    nlohmann::json j = {{"group", c.group},
                        {"name", c.name},
                        {"ok", c.ok},
                        {"message", c.message},
                        {"seconds", c.seconds}};
    if (c.details.is_object()) j.update(c.details);
    cases.push_back(std::move(j));
  }
  nlohmann::json j = {
      {"command", report.command},    {"title", report.title},
      {"ok", report.failures() == 0}, {"passed", report.cases.size() - report.failures()},
      {"failed", report.failures()},  {"cases", std::move(cases)}};
  if (report.extra.is_object()) j.update(report.extra);
  return j;
}

std::string ReportToJunit(const Report& report) {
  double total = 0;
  for (const ReportCase& c : report.cases) total += c.seconds;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<testsuites name=\"distckpt {}\" tests=\"{}\" failures=\"{}\" time=\"{:.3f}\">\n",
      XmlEscape(report.command), report.cases.size(), report.failures(), total);
  out += fmt::format(
      "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" "
      "time=\"{:.3f}\">\n",
      XmlEscape(report.title), report.cases.size(), report.failures(), total);
  for (const ReportCase& c : report.cases) {
    out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\"",
                       XmlEscape(c.group), XmlEscape(c.name), c.seconds);
    if (c.ok && c.message.empty()) {
      out += "/>\n";
      continue;
    }
    out += ">\n";
    if (!c.ok) {
      std::string first_line = c.message.substr(0, c.message.find('\n'));
      out += fmt::format("      <failure message=\"{}\" type=\"verdict\">{}</failure>\n",
                         XmlEscape(first_line), XmlEscape(c.message));
    } else {
      out += fmt::format("      <system-out>{}</system-out>\n", XmlEscape(c.message));
    }
    out += "    </testcase>\n";
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

std::string ReportToMarkdown(const Report& report) {
  const size_t failed = report.failures();
  std::string out =
      fmt::format("### distckpt {}: {}\n\n", report.command, MarkdownCell(report.title));
  out += fmt::format("**{}**: {} passed, {} failed of {}\n\n", failed == 0 ? "PASS" : "FAIL",
                     report.cases.size() - failed, failed, report.cases.size());
  out += "| | case | group | reason |\n|---|---|---|---|\n";
  // Failing cases first: a PR comment shows what broke at the top.
  for (bool want_ok : {false, true}) {
    for (const ReportCase& c : report.cases) {
      if (c.ok != want_ok) continue;
      out += fmt::format("| {} | `{}` | {} | {} |\n", c.ok ? "✅" : "❌", MarkdownCell(c.name),
                         MarkdownCell(c.group), MarkdownCell(c.message));
    }
  }
  return out;
}

void WriteReports(const ReportPaths& paths, const Report& report) {
  if (!paths.json.empty()) WriteFile(paths.json, ReportToJson(report).dump(2) + "\n");
  if (!paths.junit.empty()) WriteFile(paths.junit, ReportToJunit(report));
  if (!paths.markdown.empty()) WriteFile(paths.markdown, ReportToMarkdown(report));
}

}  // namespace distckpt
