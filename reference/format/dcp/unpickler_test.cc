#include "format/dcp/unpickler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error_testing.h"

namespace distckpt {
namespace {

using namespace std::string_literals;

PyTree Load(const std::string& bytes, const UnpickleLimits& limits = {}) {
  return Unpickle(bytes, "test.pkl", limits);
}

TEST(UnpicklerTest, ScalarsOfEveryEncoding) {
  // Protocol 4 with FRAME, as Python 3.8+ writes: (7, 300, -3, 2**40, -2**40, 2**64-1, 1.5, True,
  // None, 'h\xe9', b'\x00\x01')
  const std::string body =
      "(K\x07M\x2c\x01J\xfd\xff\xff\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x06\x00\x00\x00\x00\x00"
      "\xff"
      "\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00G?\xf8\x00\x00\x00\x00\x00\x00\x88N"
      "\x8c\x03h\xc3\xa9"
      "C\x02\x00\x01t\x94."s;
  std::string frame = "\x80\x04\x95"s;
  for (int i = 0; i < 8; ++i) frame += static_cast<char>((body.size() >> (8 * i)) & 0xff);
  const std::string stream = frame + body;
  PyTree tree = Load(stream);
  const PyValue& t = *tree.root();
  ASSERT_EQ(t.kind, PyKind::kTuple);
  ASSERT_EQ(t.items.size(), 11u);
  EXPECT_EQ(t.items[0]->integer, 7);
  EXPECT_EQ(t.items[1]->integer, 300);
  EXPECT_EQ(t.items[2]->integer, -3);
  EXPECT_EQ(t.items[3]->integer, int64_t{1} << 40);
  EXPECT_EQ(t.items[4]->integer, -(int64_t{1} << 40));
  EXPECT_EQ(t.items[5]->kind, PyKind::kUInt);
  EXPECT_EQ(t.items[5]->uinteger, UINT64_MAX);
  EXPECT_EQ(t.items[6]->real, 1.5);
  EXPECT_TRUE(t.items[7]->boolean);
  EXPECT_EQ(t.items[8]->kind, PyKind::kNone);
  EXPECT_EQ(t.items[9]->text, "h\xc3\xa9");
  EXPECT_EQ(t.items[10]->kind, PyKind::kBytes);
  EXPECT_EQ(t.items[10]->text, "\x00\x01"s);
}

TEST(UnpicklerTest, MemoSharesMutableContainers) {
  // x = []; ([x, x] with x appended to after memoization): both refer to one list.
  const std::string stream =
      "\x80\x02]q\x00(h\x00h\x00"
      "e\x94K\x05"
      "a."s;
  PyTree tree = Load(stream);
  const PyValue& outer = *tree.root();
  ASSERT_EQ(outer.kind, PyKind::kList);
  ASSERT_EQ(outer.items.size(), 3u);  // the list holds itself twice, then 5
  EXPECT_EQ(outer.items[0], &outer);
  EXPECT_EQ(outer.items[2]->integer, 5);
}

TEST(UnpicklerTest, AllowedCallsBuildDataOnly) {
  // OrderedDict([('a', 1)]), PosixPath('/', 'ck', 'x'), getattr(enum, 'TORCH_CONTIGUOUS_FORMAT'),
  // torch.Size((2, 3))
  const std::string stream =
      "\x80\x02(ccollections\nOrderedDict\n]X\x01\x00\x00\x00"
      "aK\x01\x86"
      "a\x85R"
      "cpathlib._local\nPosixPath\nX\x01\x00\x00\x00/X\x02\x00\x00\x00"
      "ckX\x01\x00\x00\x00x\x87R"
      "cbuiltins\ngetattr\nctorch.distributed._shard.sharded_tensor.metadata\nMEM_FORMAT_ENCODING\n"
      "X\x17\x00\x00\x00TORCH_CONTIGUOUS_FORMAT\x86R"
      "ctorch\nSize\nK\x02K\x03\x86\x85Rt."s;
  PyTree tree = Load(stream);
  const PyValue& t = *tree.root();
  ASSERT_EQ(t.items.size(), 4u);
  EXPECT_EQ(t.items[0]->kind, PyKind::kDict);
  EXPECT_EQ(t.items[0]->Get("a")->integer, 1);
  EXPECT_EQ(t.items[1]->text, "/ck/x");
  EXPECT_EQ(t.items[2]->GlobalName(),
            "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_"
            "FORMAT");
  EXPECT_EQ(PyToShape(*t.items[3], "size"), (Shape{2, 3}));
}

TEST(UnpicklerTest, RefusesGlobalsOffTheAllowList) {
  const std::string marker = testing::TempDir() + "/distckpt-unpickler-pwned";
  ::unlink(marker.c_str());
  const std::string cmd = "touch " + marker;
  const std::string len(1, static_cast<char>(cmd.size()));
  for (const std::string& stream :
       {"\x80\x02\x63os\nsystem\nX"s + std::string(1, static_cast<char>(cmd.size())) +
            "\x00\x00\x00"s + cmd + "\x85R."s,
        "\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x8c"s + len + cmd + "\x85R."s}) {
    EXPECT_THAT([&] { Load(stream); }, ThrowsError(ErrorKind::kUnsupported, "'os.system'"));
  }
  EXPECT_EQ(::access(marker.c_str(), F_OK), -1) << "something was executed";
  EXPECT_THAT(
      [&] {
        Load(
            "\x80\x02\x63"
            "builtins\neval\n."s);
      },
      ThrowsError(ErrorKind::kUnsupported, "'builtins.eval'"));
  EXPECT_THAT([&] { Load("\x80\x02\x63torch\nload\n."s); },
              ThrowsError(ErrorKind::kUnsupported, "'torch.load'"));
  // getattr only on an allowed class: getattr('x', 'y') is refused.
  EXPECT_THAT(
      [&] {
        Load(
            "\x80\x02\x63"
            "builtins\ngetattr\nX\x01\x00\x00\x00xX\x01\x00\x00\x00y\x86R."s);
      },
      ThrowsError(ErrorKind::kUnsupported, "getattr"));
  EXPECT_TRUE(IsAllowedGlobal("torch.distributed.checkpoint.metadata", "Metadata"));
  EXPECT_TRUE(IsAllowedGlobal("argparse", "Namespace"));
  EXPECT_FALSE(IsAllowedGlobal("torch.distributed.checkpoint.metadata", "__builtins__"));
}

// Megatron-Core 0.20's args: exit_signal = signal.SIGTERM (REDUCE(signal.Signals, (15,))),
// and InferenceCudaGraphScope, a class 0.15's allow-list did not know.
TEST(UnpicklerTest, OpensEveryClassOfMegatronsSafeGlobals) {
  for (const auto& [module, name] : std::vector<std::pair<std::string, std::string>>{
           {"signal", "Signals"},
           {"megatron.core.transformer.enums", "InferenceCudaGraphScope"},
           {"megatron.core.transformer.enums", "CudaGraphScope"},
           {"megatron.core.transformer.enums", "CudaGraphModule"},
           {"megatron.core.optimizer.optimizer_config", "OptimizerConfig"},
           {"_io", "BytesIO"},
           {"torch._C", "Generator"},
           {"types", "SimpleNamespace"},
           {"numpy.dtypes", "UInt32DType"},
           {"megatron.core.rerun_state_machine", "RerunDiagnostic"}}) {
    EXPECT_TRUE(IsAllowedGlobal(module, name)) << module << "." << name;
    EXPECT_FALSE(IsForbiddenGlobal(module, name)) << module << "." << name;
  }
  UnpickleLimits strict;
  strict.unknown_globals = UnknownGlobalPolicy::kRefuse;
  PyTree tree = Load("\x80\x02\x63signal\nSignals\nK\x0f\x85R."s, strict);
  EXPECT_EQ(tree.root()->GlobalName(), "signal.Signals");
  EXPECT_EQ(tree.root()->args->items[0]->integer, 15);
  TakeUnknownGlobalNotes();
}

TEST(UnpicklerTest, CarriesUnknownClassesAsInertDataAndNotesThem) {
  TakeUnknownGlobalNotes();
  // NEWOBJ(mylib.config.RunConfig, ()) with BUILD state {"lr": 3}, then
  // REDUCE(mylib.enums.Mode, ("fast",)).
  const std::string stream =
      "\x80\x02(\x63mylib.config\nRunConfig\n)\x81}X\x02\x00\x00\x00lrK\x03sb"
      "\x63mylib.enums\nMode\nX\x04\x00\x00\x00"
      "fast\x85Rl."s;
  PyTree tree = Load(stream);
  const PyValue& list = *tree.root();
  ASSERT_EQ(list.items.size(), 2u);
  EXPECT_TRUE(list.items[0]->IsInstance("mylib.config", "RunConfig"));
  EXPECT_TRUE(list.items[0]->callable->unknown);
  EXPECT_EQ(list.items[0]->Field("lr")->integer, 3);
  EXPECT_EQ(list.items[1]->GlobalName(), "mylib.enums.Mode");
  EXPECT_EQ(list.items[1]->args->items[0]->text, "fast");
  std::vector<UnknownGlobalNote> notes = TakeUnknownGlobalNotes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0].global, "mylib.config.RunConfig");
  EXPECT_EQ(notes[1].global, "mylib.enums.Mode");
  EXPECT_EQ(notes[0].source, "test.pkl");
  EXPECT_THAT(
      DescribeUnknownGlobal(notes[0]),
      testing::HasSubstr("test.pkl: unknown class 'mylib.config.RunConfig' carried as opaque"));

  // Under the strict policy (--strict-globals) the same stream is refused.
  UnpickleLimits strict;
  strict.unknown_globals = UnknownGlobalPolicy::kRefuse;
  EXPECT_THAT([&] { Load(stream, strict); },
              ThrowsError(ErrorKind::kUnsupported,
                          "'mylib.config.RunConfig' (not on distckpt's allow-list"));
  // The process-wide policy applies where the limits do not say.
  SetUnknownGlobalPolicy(UnknownGlobalPolicy::kRefuse);
  EXPECT_THAT([&] { Load(stream); }, ThrowsError(ErrorKind::kUnsupported, "--strict-globals"));
  SetUnknownGlobalPolicy(UnknownGlobalPolicy::kCarry);
  EXPECT_NO_THROW(Load(stream));
  // getattr on an unknown class is refused: it could name any attribute.
  EXPECT_THAT(
      [&] {
        Load(
            "\x80\x02\x63"
            "builtins\ngetattr\n\x63mylib\nX\nX\x01\x00\x00\x00y\x86R."s);
      },
      ThrowsError(ErrorKind::kUnsupported, "getattr"));
  TakeUnknownGlobalNotes();
}

TEST(UnpicklerTest, ForbiddenGlobalsAreRefusedUnderEveryPolicy) {
  TakeUnknownGlobalNotes();
  for (const auto& [module, name] :
       std::vector<std::pair<std::string, std::string>>{{"os", "system"},
                                                        {"posix", "system"},
                                                        {"subprocess", "Popen"},
                                                        {"builtins", "eval"},
                                                        {"builtins", "exec"},
                                                        {"builtins", "__import__"},
                                                        {"__builtin__", "open"},
                                                        {"torch", "load"},
                                                        {"torch.hub", "load"},
                                                        {"numpy", "load"},
                                                        {"importlib", "import_module"},
                                                        {"runpy", "run_path"},
                                                        {"functools", "partial"},
                                                        {"operator", "attrgetter"},
                                                        {"io", "open"},
                                                        {"signal", "signal"},
                                                        {"types", "FunctionType"},
                                                        {"shutil", "rmtree"},
                                                        {"mylib", "__reduce__"}}) {
    EXPECT_TRUE(IsForbiddenGlobal(module, name)) << module << "." << name;
    const std::string stream = "\x80\x02\x63"s + module + "\n" + name + "\nN\x85R."s;
    EXPECT_THAT([&] { Load(stream); },
                ThrowsError(ErrorKind::kUnsupported, "would run code or reach the system"))
        << module << "." << name;
  }
  for (const auto& [module, name] :
       std::vector<std::pair<std::string, std::string>>{{"builtins", "set"},
                                                        {"builtins", "bytearray"},
                                                        {"copyreg", "_reconstructor"},
                                                        {"mylib", "Thing"},
                                                        {"osmosis", "system"}}) {
    EXPECT_FALSE(IsForbiddenGlobal(module, name)) << module << "." << name;
  }
  EXPECT_TRUE(TakeUnknownGlobalNotes().empty());
}

TEST(UnpicklerTest, BoundsNestingMemoAndNodes) {
  // 100000 nested lists: refused, not a stack overflow.
  std::string deep = "\x80\x02"s + std::string(100000, ']') + std::string(99999, 'a') + ".";
  EXPECT_THAT([&] { Load(deep); }, ThrowsError(ErrorKind::kCorruption, "nested deeper than 256"));
  std::string marks = "\x80\x02"s + std::string(100000, '(') + std::string(100000, 't') + ".";
  EXPECT_THAT([&] { Load(marks); }, ThrowsError(ErrorKind::kCorruption, "nested deeper"));

  UnpickleLimits small;
  small.max_memo = 4;
  small.max_nodes = 50;
  std::string memo = "\x80\x02N";
  for (int i = 0; i < 5; ++i) memo += "q"s + static_cast<char>(i);
  EXPECT_THAT([&] { Load(memo + ".", small); }, ThrowsError(ErrorKind::kCorruption, "memo"));
  EXPECT_THAT([&] { Load("\x80\x02"s + std::string(60, 'N') + ".", small); },
              ThrowsError(ErrorKind::kCorruption, "more than 50 values"));
}

TEST(UnpicklerTest, MalformedStreamsAreCorruptionNotCrashes) {
  const std::pair<std::string, std::string> cases[] = {
      {"\x80\x02X\xff\xff\xff\xff."s, "truncated"},  // length past the end: nothing allocated
      {"\x80\x02\x8e\xff\xff\xff\xff\xff\xff\xff\x7f"s, "truncated"},
      {"\x80\x02K\x01"s, "no STOP"},
      {"\x80\x02"
       "a."s,
       "stack underflow"},
      {"\x80\x02(a."s, "stack underflow"},
      {"\x80\x02h\x07."s, "memo key 7"},
      {"\x80\x02K\x01K\x02\x81."s, "NEWOBJ"},
      {"\x80\x02}K\x01u."s, "no MARK"},
      {"\x80\x02K\x01N\x62."s, "BUILD needs a object"},
      {"\x80\x02\x63torch\nSize"s, "unterminated"},
  };
  for (const auto& [stream, message] : cases) {
    SCOPED_TRACE(message);
    EXPECT_THAT([&] { Load(stream); }, ThrowsError(ErrorKind::kCorruption, message));
  }
  EXPECT_THAT([&] { Load("\x80\x06N."s); }, ThrowsError(ErrorKind::kUnsupported, "protocol 6"));
  EXPECT_THAT([&] { Load("\x80\x02\x82\x01."s); },
              ThrowsError(ErrorKind::kUnsupported, "opcode 0x82"));
  EXPECT_THAT([&] { Load("\x80\x02K\x01K\x02."s); },
              testing::Not(testing::Throws<std::exception>()));
}

}  // namespace
}  // namespace distckpt
