#include "format/dcp/unpickler.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "core/little_endian.h"

namespace distckpt {
namespace {

// Opcodes (Python's Lib/pickle.py names).
enum Op : unsigned char {
  kMark = '(',
  kStop = '.',
  kPop = '0',
  kPopMark = '1',
  kDup = '2',
  kBinFloat = 'G',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinString = 'T',
  kShortBinString = 'U',
  kBinUnicode = 'X',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kDict = 'd',
  kEmptyDict = '}',
  kAppends = 'e',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kList = 'l',
  kEmptyList = ']',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kEmptyTuple = ')',
  kSetItems = 'u',
  kBinBytes = 'B',
  kShortBinBytes = 'C',
  kProto = 0x80,
  kNewObj = 0x81,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kLong4 = 0x8b,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e,
  kEmptySet = 0x8f,
  kAddItems = 0x90,
  kFrozenSet = 0x91,
  kNewObjEx = 0x92,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
  kByteArray8 = 0x96,
};

class Unpickler {
 public:
  Unpickler(std::string_view in, const std::string& source, const UnpickleLimits& limits)
      : in_(in), source_(source), limits_(limits) {}

  PyTree Run() {
    while (pos_ < in_.size()) {
      op_pos_ = pos_;
      if (Step(static_cast<unsigned char>(in_[pos_++]))) {
        tree_.set_root(Pop());
        return std::move(tree_);
      }
    }
    Corrupt("truncated stream (no STOP opcode)");
  }

 private:
  [[noreturn]] void Corrupt(std::string_view problem) const {
    Fail(ErrorKind::kCorruption, "{}: pickle: {} at byte {}", source_, problem, op_pos_);
  }

  std::string_view Take(uint64_t n) {
    if (n > in_.size() - pos_) {
      Corrupt(fmt::format("truncated stream: {} bytes needed, {} left", n, in_.size() - pos_));
    }
    std::string_view out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  uint64_t ReadLE(size_t n) { return LoadLittleEndian(Take(n).data(), n); }

  std::string_view ReadLine() {
    size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos || end - pos_ > 1024) Corrupt("unterminated GLOBAL name");
    std::string_view line = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }

  PyValue* New(PyKind kind) {
    if (tree_.size() >= limits_.max_nodes) {
      Corrupt(fmt::format("more than {} values", limits_.max_nodes));
    }
    return tree_.New(kind);
  }

  void Push(PyValue* v) { stack_.push_back(v); }

  PyValue* Pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
      Corrupt("stack underflow");
    }
    PyValue* v = stack_.back();
    stack_.pop_back();
    return v;
  }

  PyValue* Top() {
    PyValue* v = Pop();
    stack_.push_back(v);
    return v;
  }

  std::vector<PyValue*> PopMark() {
    if (marks_.empty()) Corrupt("no MARK on the stack");
    std::vector<PyValue*> items(stack_.begin() + static_cast<ptrdiff_t>(marks_.back()),
                                stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }

  PyValue* Expect(PyValue* v, PyKind kind, std::string_view op) {
    if (v->kind != kind) {
      Corrupt(fmt::format("{} needs a {}, found a {}", op, PyKindName(kind), PyKindName(v->kind)));
    }
    return v;
  }

  // Records that `child` now hangs below `parent`, bounding the nesting.
  void Adopt(PyValue* parent, const PyValue* child) {
    parent->depth = std::max(parent->depth, child->depth + 1);
    if (parent->depth > limits_.max_depth) {
      Corrupt(fmt::format("values nested deeper than {}", limits_.max_depth));
    }
  }

  PyValue* Container(PyKind kind, const std::vector<PyValue*>& items) {
    PyValue* v = New(kind);
    for (PyValue* item : items) {
      v->items.push_back(item);
      Adopt(v, item);
    }
    return v;
  }

  void Append(PyValue* list, const std::vector<PyValue*>& items) {
    if (list->kind != PyKind::kList && list->kind != PyKind::kSet) {
      Corrupt(fmt::format("APPEND(S)/ADDITEMS to a {}", PyKindName(list->kind)));
    }
    for (PyValue* item : items) {
      list->items.push_back(item);
      Adopt(list, item);
    }
  }

  void SetItems(PyValue* dict, const std::vector<PyValue*>& items) {
    Expect(dict, PyKind::kDict, "SETITEM(S)");
    if (items.size() % 2 != 0) Corrupt("SETITEMS with an odd number of items");
    for (size_t i = 0; i < items.size(); i += 2) {
      dict->entries.emplace_back(items[i], items[i + 1]);
      Adopt(dict, items[i]);
      Adopt(dict, items[i + 1]);
    }
  }

  void Memo(uint64_t index) {
    if (!memo_.contains(index) && memo_.size() >= limits_.max_memo) {
      Corrupt(fmt::format("more than {} memo entries", limits_.max_memo));
    }
    memo_[index] = Top();
  }

  void Recall(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) Corrupt(fmt::format("memo key {} was never set", index));
    Push(it->second);
  }

  void PushStr(PyKind kind, uint64_t length) {
    PyValue* v = New(kind);
    v->text = std::string(Take(length));
    Push(v);
  }

  // LONG1 / LONG4: n bytes of little-endian two's complement.
  void PushLong(uint64_t n) {
    std::string_view b = Take(n);
    auto byte = [&](size_t i) { return static_cast<unsigned char>(b[i]); };
    const bool negative = n > 0 && (byte(n - 1) & 0x80);
    uint64_t u = negative ? ~uint64_t{0} : 0;  // sign-extended
    for (size_t i = 0; i < std::min<uint64_t>(n, 8); ++i) {
      u = (u & ~(uint64_t{0xff} << (8 * i))) | uint64_t{byte(i)} << (8 * i);
    }
    // Bytes past the eighth must only extend the sign of the 64-bit value
    // (or be zeros above an unsigned one); anything else is a big int.
    const bool low_negative = (u >> 63) != 0;
    bool fits_int = true, fits_uint = !negative;
    for (size_t i = 8; i < n; ++i) {
      fits_int &= byte(i) == (low_negative ? 0xff : 0x00);
      fits_uint &= byte(i) == 0;
    }
    PyValue* v = New(PyKind::kInt);
    if (fits_int) {
      v->integer = static_cast<int64_t>(u);
    } else if (fits_uint) {
      v->kind = PyKind::kUInt;
      v->uinteger = u;
    } else {
      v->kind = PyKind::kBigInt;
      v->text = std::string(b);
    }
    Push(v);
  }

  void PushGlobal(std::string module, std::string name) {
    const bool known =
        (limits_.allow_global ? limits_.allow_global : IsAllowedGlobal)(module, name);
    if (!known && IsForbiddenGlobal(module, name)) {
      Fail(ErrorKind::kUnsupported,
           "{}: refusing to unpickle global '{}.{}' (it would run code or reach the system in "
           "Python; nothing was executed)",
           source_, module, name);
    }
    if (!known && limits_.unknown_globals.value_or(GetUnknownGlobalPolicy()) ==
                      UnknownGlobalPolicy::kRefuse) {
      Fail(ErrorKind::kUnsupported,
           "{}: refusing to unpickle global '{}.{}' (not on distckpt's allow-list of DCP, torch "
           "and Megatron classes, and unknown classes are refused (--strict-globals); nothing "
           "was executed)",
           source_, module, name);
    }
    if (!known) NoteUnknownGlobal(source_, fmt::format("{}.{}", module, name));
    PyValue* v = New(PyKind::kGlobal);
    v->unknown = !known;
    v->text = std::move(module);
    v->name = std::move(name);
    Push(v);
  }

  // REDUCE / NEWOBJ of an allowed global: recorded, or evaluated when it only builds data.
  void Call(PyValue* callable, PyValue* args) {
    Expect(callable, PyKind::kGlobal, "REDUCE/NEWOBJ");
    Expect(args, PyKind::kTuple, "REDUCE/NEWOBJ arguments");
    const std::vector<const PyValue*>& a = args->items;
    if (callable->Is("collections", "OrderedDict")) {
      PyValue* dict = New(PyKind::kDict);
      if (!a.empty()) {
        for (const PyValue* pair : PyToSequence(*a[0], source_ + ": OrderedDict items")) {
          if (pair->kind != PyKind::kTuple || pair->items.size() != 2) Corrupt("OrderedDict item");
          dict->entries.emplace_back(pair->items[0], pair->items[1]);
        }
        Adopt(dict, args);
      }
      return Push(dict);
    }
    if (callable->Is("pathlib", "PosixPath") || callable->Is("pathlib._local", "PosixPath")) {
      PyValue* path = New(PyKind::kStr);
      for (const PyValue* part : a) {
        const std::string& s = PyToStr(*part, source_ + ": PosixPath part");
        if (!path->text.empty() && path->text.back() != '/') path->text += '/';
        path->text += s;
      }
      return Push(path);
    }
    if (callable->Is("_codecs", "encode")) {
      // Protocol 2's spelling of bytes (numpy arrays): encode(str, "latin1").
      if (a.size() != 2 || a[0]->kind != PyKind::kStr || a[1]->kind != PyKind::kStr ||
          (a[1]->text != "latin1" && a[1]->text != "latin-1")) {
        Fail(ErrorKind::kUnsupported, "{}: refusing _codecs.encode except (str, \"latin1\")",
             source_);
      }
      PyValue* bytes = New(PyKind::kBytes);
      const std::string& u = a[0]->text;  // UTF-8 of code points < 256
      for (size_t i = 0; i < u.size(); ++i) {
        const auto c = static_cast<unsigned char>(u[i]);
        if (c < 0x80) {
          bytes->text.push_back(static_cast<char>(c));
        } else if ((c == 0xC2 || c == 0xC3) && i + 1 < u.size()) {
          bytes->text.push_back(
              static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(u[++i]) & 0x3F)));
        } else {
          Corrupt("latin1 text with a code point above 255");
        }
      }
      return Push(bytes);
    }
    if (callable->Is("builtins", "getattr")) {
      if (a.size() != 2 || a[0]->kind != PyKind::kGlobal || a[0]->unknown ||
          a[1]->kind != PyKind::kStr) {
        Fail(ErrorKind::kUnsupported,
             "{}: refusing builtins.getattr except on an allowed class with a str name", source_);
      }
      PyValue* attr = New(PyKind::kGlobal);
      attr->text = a[0]->text;
      attr->name = a[0]->name + "." + a[1]->text;
      return Push(attr);
    }
    PyValue* obj = New(PyKind::kObject);
    obj->callable = callable;
    obj->args = args;
    Adopt(obj, args);
    Push(obj);
  }

  // Executes one opcode; true at STOP.
  bool Step(unsigned char op) {
    switch (op) {
      case kProto:
        if (static_cast<unsigned char>(Take(1)[0]) > 5) {
          Fail(ErrorKind::kUnsupported, "{}: pickle protocol {} is newer than 5", source_,
               static_cast<unsigned char>(in_[pos_ - 1]));
        }
        break;
      case kFrame: {
        uint64_t n = ReadLE(8);
        if (n > in_.size() - pos_) Corrupt("FRAME longer than the stream");
        break;
      }
      case kStop:
        return true;
      case kMark:
        marks_.push_back(stack_.size());
        break;
      case kPop:
        if (!marks_.empty() && stack_.size() == marks_.back())
          marks_.pop_back();
        else
          Pop();
        break;
      case kPopMark:
        PopMark();
        break;
      case kDup:
        Push(Top());
        break;
      case kNone:
        Push(New(PyKind::kNone));
        break;
      case kNewTrue:
      case kNewFalse: {
        PyValue* v = New(PyKind::kBool);
        v->boolean = op == kNewTrue;
        Push(v);
        break;
      }
      case kBinInt: {
        PyValue* v = New(PyKind::kInt);
        v->integer = static_cast<int32_t>(ReadLE(4));
        Push(v);
        break;
      }
      case kBinInt1:
      case kBinInt2: {
        PyValue* v = New(PyKind::kInt);
        v->integer = static_cast<int64_t>(ReadLE(op == kBinInt1 ? 1 : 2));
        Push(v);
        break;
      }
      case kLong1:
        PushLong(ReadLE(1));
        break;
      case kLong4:
        PushLong(ReadLE(4));
        break;
      case kBinFloat: {
        uint64_t bits = 0;
        for (char c : Take(8)) bits = (bits << 8) | static_cast<unsigned char>(c);  // big-endian
        PyValue* v = New(PyKind::kFloat);
        std::memcpy(&v->real, &bits, sizeof bits);
        Push(v);
        break;
      }
      case kShortBinUnicode:
        PushStr(PyKind::kStr, ReadLE(1));
        break;
      case kBinUnicode:
        PushStr(PyKind::kStr, ReadLE(4));
        break;
      case kBinUnicode8:
        PushStr(PyKind::kStr, ReadLE(8));
        break;
      case kShortBinString:
        PushStr(PyKind::kStr, ReadLE(1));
        break;  // Python 2 str, ASCII
      case kBinString:
        PushStr(PyKind::kStr, ReadLE(4));
        break;
      case kShortBinBytes:
        PushStr(PyKind::kBytes, ReadLE(1));
        break;
      case kBinBytes:
        PushStr(PyKind::kBytes, ReadLE(4));
        break;
      case kBinBytes8:
      case kByteArray8:
        PushStr(PyKind::kBytes, ReadLE(8));
        break;
      case kEmptyTuple:
        Push(New(PyKind::kTuple));
        break;
      case kTuple:
        Push(Container(PyKind::kTuple, PopMark()));
        break;
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        std::vector<PyValue*> items(op - kTuple1 + 1);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = Pop();
        Push(Container(PyKind::kTuple, items));
        break;
      }
      case kEmptyList:
        Push(New(PyKind::kList));
        break;
      case kList:
        Push(Container(PyKind::kList, PopMark()));
        break;
      case kAppend: {
        PyValue* item = Pop();
        Append(Top(), {item});
        break;
      }
      case kAppends:
      case kAddItems: {
        std::vector<PyValue*> items = PopMark();
        Append(Top(), items);
        break;
      }
      case kEmptySet:
        Push(New(PyKind::kSet));
        break;
      case kFrozenSet:
        Push(Container(PyKind::kSet, PopMark()));
        break;
      case kEmptyDict:
        Push(New(PyKind::kDict));
        break;
      case kDict: {
        PyValue* dict = New(PyKind::kDict);
        SetItems(dict, PopMark());
        Push(dict);
        break;
      }
      case kSetItem: {
        PyValue* value = Pop();
        PyValue* key = Pop();
        SetItems(Top(), {key, value});
        break;
      }
      case kSetItems: {
        std::vector<PyValue*> items = PopMark();
        SetItems(Top(), items);
        break;
      }
      case kBinPut:
        Memo(ReadLE(1));
        break;
      case kLongBinPut:
        Memo(ReadLE(4));
        break;
      case kMemoize:
        Memo(memo_.size());
        break;
      case kBinGet:
        Recall(ReadLE(1));
        break;
      case kLongBinGet:
        Recall(ReadLE(4));
        break;
      case kGlobal: {
        std::string module(ReadLine());
        PushGlobal(std::move(module), std::string(ReadLine()));
        break;
      }
      case kStackGlobal: {
        PyValue* name = Expect(Pop(), PyKind::kStr, "STACK_GLOBAL");
        PyValue* module = Expect(Pop(), PyKind::kStr, "STACK_GLOBAL");
        PushGlobal(module->text, name->text);
        break;
      }
      case kReduce: {
        PyValue* args = Pop();
        Call(Pop(), args);
        break;
      }
      case kNewObj: {
        PyValue* args = Pop();
        Call(Pop(), args);
        break;
      }
      case kNewObjEx: {
        PyValue* kwargs = Expect(Pop(), PyKind::kDict, "NEWOBJ_EX keyword arguments");
        if (!kwargs->entries.empty()) {
          Fail(ErrorKind::kUnsupported, "{}: pickle: NEWOBJ_EX with keyword arguments", source_);
        }
        PyValue* args = Pop();
        Call(Pop(), args);
        break;
      }
      case kBuild: {
        PyValue* state = Pop();
        // An OrderedDict (evaluated to a dict) with instance attributes, e.g.
        // Module.state_dict()'s `_metadata` of module versions: the items are
        // the data; the attributes are dropped.
        if (Top()->kind == PyKind::kDict) break;
        PyValue* obj = Expect(Top(), PyKind::kObject, "BUILD");
        obj->state = state;
        Adopt(obj, state);
        break;
      }
      case kBinPersId: {
        PyValue* id = New(PyKind::kPersistent);
        id->items.push_back(Pop());
        Adopt(id, id->items[0]);
        Push(id);
        break;
      }
      default:
        Fail(ErrorKind::kUnsupported, "{}: pickle: unsupported opcode 0x{:02x} at byte {}", source_,
             op, op_pos_);
    }
    return false;
  }

  std::string_view in_;
  const std::string& source_;
  const UnpickleLimits& limits_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  std::vector<PyValue*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PyValue*> memo_;
  PyTree tree_;
};

}  // namespace

PyTree Unpickle(std::string_view bytes, const std::string& source, const UnpickleLimits& limits) {
  return Unpickler(bytes, source, limits).Run();
}

}  // namespace distckpt
