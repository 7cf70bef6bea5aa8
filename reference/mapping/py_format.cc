// Python-style formatting helpers (see py_format.h).
#include "mapping/py_format.h"

#include <fmt/format.h>

#include <algorithm>

namespace distckpt {

std::string PyRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == quote) out += '\\';
        out += c;
    }
  }
  out += quote;
  return out;
}

std::string PyTuple(const std::vector<std::string>& elements) {
  if (elements.size() == 1) return "(" + elements[0] + ",)";
  return fmt::format("({})", fmt::join(elements, ", "));
}

std::string PyList(const std::vector<std::string>& elements) {
  return fmt::format("[{}]", fmt::join(elements, ", "));
}

std::string PyStrSet(const std::set<std::string>& items) {
  if (items.empty()) return "set()";
  std::vector<std::string> reprs;
  for (const std::string& item : items) reprs.push_back(PyRepr(item));
  return fmt::format("{{{}}}", fmt::join(reprs, ", "));
}

namespace {

// numpy.core.arrayprint._formatArray with its defaults: separator ' ',
// linewidth 75, edgeitems 3, legacy printing off.
class NumpyPrinter {
 public:
  NumpyPrinter(const Shape& shape, const std::function<int64_t(int64_t)>& at, bool summarize)
      : shape_(shape), at_(at), summarize_(summarize), index_(shape.size(), 0) {}

  std::string Print() {
    width_ = 0;
    measuring_ = true;
    Recurse(0, " ", kLineWidth);  // first pass: the widest displayed element
    measuring_ = false;
    return Recurse(0, " ", kLineWidth);
  }

 private:
  static constexpr int64_t kLineWidth = 75;
  static constexpr int64_t kEdgeItems = 3;

  std::string Element() {
    int64_t linear = 0;
    for (size_t axis = 0; axis < shape_.size(); ++axis)
      linear = linear * shape_[axis] + index_[axis];
    std::string text = std::to_string(at_(linear));
    if (measuring_) {
      width_ = std::max(width_, text.size());
      return text;
    }
    return std::string(width_ - text.size(), ' ') + text;
  }

  static void ExtendLine(std::string& s, std::string& line, const std::string& word,
                         int64_t line_width, const std::string& next_line_prefix) {
    bool needs_wrap = static_cast<int64_t>(line.size() + word.size()) > line_width;
    if (line.size() <= next_line_prefix.size()) needs_wrap = false;
    if (needs_wrap) {
      s += line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
      line = next_line_prefix;
    }
    line += word;
  }

  std::string Recurse(size_t axis, const std::string& hanging_indent, int64_t curr_width) {
    if (axis == shape_.size()) return Element();
    const std::string next_hanging_indent = hanging_indent + " ";
    const int64_t next_width = curr_width - 1;
    const int64_t len = shape_[axis];
    const bool show_summary = summarize_ && 2 * kEdgeItems < len;
    const int64_t leading = show_summary ? kEdgeItems : 0;
    const int64_t trailing = show_summary ? kEdgeItems : len;
    // Visiting order: the leading items, the summary mark, then the trailing items.
    std::vector<int64_t> items;
    for (int64_t i = 0; i < leading; ++i) items.push_back(i);
    if (show_summary) items.push_back(-1);
    for (int64_t i = trailing; i >= 1; --i) items.push_back(len - i);

    std::string s;
    if (axis + 1 == shape_.size()) {
      const int64_t elem_width = curr_width - 1;
      std::string line = hanging_indent;
      for (size_t k = 0; k < items.size(); ++k) {
        std::string word = "...";
        if (items[k] >= 0) {
          index_[axis] = items[k];
          word = Recurse(axis + 1, next_hanging_indent, next_width);
        }
        ExtendLine(s, line, word, elem_width, hanging_indent);
        if (k + 1 < items.size()) line += " ";
      }
      s += line;
    } else {
      const std::string line_sep(shape_.size() - axis - 1, '\n');
      for (size_t k = 0; k < items.size(); ++k) {
        std::string nested = "...";
        if (items[k] >= 0) {
          index_[axis] = items[k];
          nested = Recurse(axis + 1, next_hanging_indent, next_width);
        }
        s += hanging_indent + nested;
        if (k + 1 < items.size()) s += line_sep;
      }
    }
    return "[" + s.substr(hanging_indent.size()) + "]";
  }

  const Shape& shape_;
  const std::function<int64_t(int64_t)>& at_;
  const bool summarize_;
  std::vector<int64_t> index_;
  size_t width_ = 0;
  bool measuring_ = false;
};

}  // namespace

std::string NumpyIntArrayStr(const Shape& shape, const std::function<int64_t(int64_t)>& at) {
  if (shape.empty()) return std::to_string(at(0));
  if (Volume(shape) == 0) return "[]";
  return NumpyPrinter(shape, at, Volume(shape) > 1000).Print();
}

}  // namespace distckpt
