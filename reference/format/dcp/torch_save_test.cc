#include "format/dcp/torch_save.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "core/error_testing.h"
#include "format/dcp/pickler.h"
#include "format/dcp/testing.h"
#include "format/dcp/unknown_globals.h"
#include "format/dcp/unpickler.h"

namespace distckpt {
namespace {

using namespace std::string_literals;

std::string SaveTensor(DType dtype, const Shape& shape, const std::string& data) {
  return ZipToString([&](ZipWriter& zip) {
    WriteTensorRecords(zip, dtype, shape, std::as_bytes(std::span(data.data(), data.size())));
  });
}

// An archive whose data.pkl is `pickle` and whose data/0 is `storage`.
std::string Archive(const std::string& pickle, const std::string& storage,
                    const std::string& order = "little") {
  return ZipToString([&](ZipWriter& zip) {
    zip.AddRecord("data.pkl", pickle);
    zip.AddRecord("byteorder", order);
    zip.AddRecord("data/0", storage);
    zip.AddRecord("version", "3\n");
  });
}

std::string Floats(std::initializer_list<float> values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

TEST(TorchSaveTest, EveryDTypeRoundTrips) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    std::string data(6 * DTypeSize(dtype), '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i % 2);  // valid bools too
    const std::string bytes = SaveTensor(dtype, {2, 3}, data);
    ZipReader zip(bytes, "t");
    TorchTensor t = ReadTensorRecord(zip);
    EXPECT_EQ(t.dtype, dtype);
    EXPECT_EQ(t.size, (Shape{2, 3}));
    EXPECT_EQ(t.stride, (Shape{3, 1}));
    EXPECT_TRUE(t.IsContiguous());
    EXPECT_EQ(t.storage_bytes, data.size());
    EXPECT_EQ(zip.ReadRecord(zip.Get("data/" + t.storage_key)), data);
    // float8 has no legacy storage class: _rebuild_tensor_v3 with an UntypedStorage.
    const bool v3 = dtype == DType::kF8E4M3FN || dtype == DType::kF8E5M2;
    EXPECT_EQ(zip.ReadRecord(zip.Get("data.pkl")).find("_rebuild_tensor_v3") != std::string::npos,
              v3);
  }
}

TEST(TorchSaveTest, StridedViewsAreGatheredInRowMajorOrder) {
  // A transposed (3, 2) view of a row-major (2, 3) storage [0..5]: stride (1, 3), as torch keeps
  // it.
  const std::string bytes =
      Archive(RebuildTensorPickle(6, 0, {3, 2}, {1, 3}), Floats({0, 1, 2, 3, 4, 5}));
  ZipReader zip(bytes, "t");
  TorchTensor t = ReadTensorRecord(zip);
  EXPECT_FALSE(t.IsContiguous());
  std::string storage = zip.ReadRecord(zip.Get("data/0"));
  float out[6];
  GatherRowMajor(t, std::as_bytes(std::span(storage.data(), storage.size())),
                 reinterpret_cast<std::byte*>(out));
  EXPECT_THAT(out, testing::ElementsAre(0, 3, 1, 4, 2, 5));
  // A storage offset and a size-1 dimension keep a view contiguous.
  TorchTensor offset =
      *AsTorchTensor(*Unpickle(RebuildTensorPickle(6, 2, {1, 4}, {9, 1}), "v").root(), "v");
  EXPECT_TRUE(offset.IsContiguous());
}

TEST(TorchSaveTest, ViewsOutsideTheirStorageAreCorruption) {
  EXPECT_THAT(
      [] {
        AsTorchTensor(*Unpickle(RebuildTensorPickle(6, 1, {2, 3}, {3, 1}), "v").root(), "v");
      },
      ThrowsError(ErrorKind::kCorruption, "reaches past the storage"));
  EXPECT_THAT(
      [] {
        AsTorchTensor(*Unpickle(RebuildTensorPickle(6, 0, {3, 2}, {1, 4}), "v").root(), "v");
      },
      ThrowsError(ErrorKind::kCorruption, "reaches past the storage"));
  EXPECT_THAT(
      [] {
        AsTorchTensor(*Unpickle(RebuildTensorPickle(6, 0, {2, 3}, {3}), "v").root(), "v");
      },
      ThrowsError(ErrorKind::kCorruption, "stride"));
  EXPECT_THAT([] { AsTorchTensor(*Unpickle(RebuildTensorPickle(-1, 0, {}, {}), "v").root(), "v"); },
              ThrowsError(ErrorKind::kCorruption, "storage of -1 elements"));
}

TEST(TorchSaveTest, ByteOrderIsChecked) {
  const std::string pickle = RebuildTensorPickle(2, 0, {2}, {1});
  EXPECT_THAT(
      [&] {
        ReadTensorRecord(ZipReader(Archive(pickle, Floats({1, 2}), "big"), "be"));
      },
      ThrowsError(ErrorKind::kUnsupported, "big-endian"));
  EXPECT_THAT(
      [&] {
        ReadTensorRecord(ZipReader(Archive(pickle, Floats({1, 2}), "middle"), "me"));
      },
      ThrowsError(ErrorKind::kCorruption, "byteorder"));
}

TEST(TorchSaveTest, JsonValuesRoundTrip) {
  const nlohmann::json value = {{"step", 7},
                                {"lr", 0.125},
                                {"name", "x"},
                                {"list", {1, {2, 3}}},
                                {"nested", {{"flag", false}, {"none", nullptr}}}};
  const std::string bytes = TorchSaveJson(value);
  EXPECT_EQ(TorchLoadJson(ZipReader(bytes, "v")), value);
  EXPECT_EQ(TorchLoadJson(ZipReader(TorchSaveJson(7), "int")), 7);
}

// Issue 39: a pickled str that is not UTF-8 (a lone surrogate, damage) was
// a bare json type_error 316 naming nothing, at a later dump.
TEST(TorchSaveTest, InvalidUtf8InAStringIsRefusedNamingTheFile) {
  for (const bool as_key : {false, true}) {
    PickleWriter w;
    const std::string bad("ok\xed\xa0\x80", 5);  // U+D800 as Python's surrogatepass writes it
    if (as_key) {
      w.Dict(false, [&] {  // {bad: 1}
        w.Str(bad);
        w.Int(1);
      });
    } else {
      w.Str(bad);
    }
    const std::string pickle = w.Finish();
    EXPECT_THAT([&] { TorchLoadJson(ZipReader(Archive(pickle, ""), "ck/common.pt")); },
                ThrowsError(ErrorKind::kCorruption,
                            "ck/common.pt: a string is not valid UTF-8 ('ok\\xed\\xa0\\x80')"));
  }
}

TEST(TorchSaveTest, PythonValuesBecomeJson) {
  // {1: b'\x01', 'ns': argparse.Namespace(a=1), 'enum': AttnBackend(5), 'dtype': torch.bfloat16,
  //  'size': torch.Size((2,)), 't': tensor([1.5, 2.5])}
  PickleWriter w;
  w.Dict(false, [&] {
    w.Int(1);
    w.Json(nullptr);
    w.Str("ns");
    w.Object("argparse", "Namespace", [&] { w.Json({{"a", 1}}); });
    w.Str("enum");
    w.Reduce([&] { w.Global("megatron.core.transformer.enums", "AttnBackend"); }, 1,
             [&] { w.Int(5); });
    w.Str("dtype");
    w.Global("torch", "bfloat16");
    w.Str("size");
    w.TorchSize({2});
  });
  nlohmann::json got = TorchLoadJson(ZipReader(Archive(w.Finish(), ""), "values"));
  EXPECT_EQ(got.at("1"), nullptr);
  EXPECT_EQ(got.at("ns"), nlohmann::json({{"__object__", "argparse.Namespace"},
                                          {"args", nlohmann::json::array()},
                                          {"state", {{"a", 1}}}}));
  EXPECT_EQ(got.at("enum"),
            nlohmann::json(
                {{"__object__", "megatron.core.transformer.enums.AttnBackend"}, {"args", {5}}}));
  EXPECT_EQ(got.at("dtype"), "torch.bfloat16");
  EXPECT_EQ(got.at("size"), nlohmann::json({2}));
  const std::string tensor = Archive(RebuildTensorPickle(2, 0, {2}, {1}), Floats({1.5, 2.5}));
  EXPECT_EQ(TorchLoadJson(ZipReader(tensor, "t")),
            nlohmann::json(
                {{"__tensor__", {{"dtype", "float32"}, {"shape", {2}}, {"data", {1.5, 2.5}}}}}));
}

// Files torch itself wrote (fixtures/pickles/make_pickles.py, torch 1.13):
// what Megatron keeps in rng_state objects and the distributed optimizer's
// common state.
std::string Fixture(const std::string& name) {
  return ReadFileBytes(DcpFixture("../pickles/" + name));
}

TEST(TorchSaveTest, MegatronRngStateWithNumpyStateLoads) {
  nlohmann::json got = TorchLoadJson(ZipReader(Fixture("rng_state.pt"), "rng_state.pt"));
  ASSERT_TRUE(got.is_array());
  const nlohmann::json& rng = got.at(0);
  // np.random.get_state(): ('MT19937', uint32 ndarray of 624 keys, pos, has_gauss, gauss)
  const nlohmann::json& np_state = rng.at("np_rng_state");
  EXPECT_EQ(np_state.at(0), "MT19937");
  EXPECT_EQ(np_state.at(2), 624);
  const std::string dumped = np_state.at(1).dump();
  EXPECT_NE(dumped.find("numpy"), std::string::npos) << dumped.substr(0, 200);
  EXPECT_EQ(rng.at("torch_rng_state").at("__tensor__").at("shape"), nlohmann::json({16}));
  EXPECT_EQ(rng.at("random_rng_state").at(0), 3);  // random.getstate(): (version 3, ...)
}

TEST(TorchSaveTest, TupleKeysBecomeTheirPythonRepr) {
  nlohmann::json got =
      TorchLoadJson(ZipReader(Fixture("optimizer_common.pt"), "optimizer_common.pt"));
  EXPECT_EQ(got.at("per_bucket_numel"),
            nlohmann::json({{"(0, 0)", {4096, 2048}}, {"(0, 1)", {1024}}}));
  EXPECT_EQ(got.at("per_bucket_numel_unpadded"),
            nlohmann::json({{"(torch.bfloat16, torch.float32)", {4000, 2000}}}));
  EXPECT_EQ(got.at("args").at("__object__"), "argparse.Namespace");
  EXPECT_EQ(got.at("args").at("state").at("tensor_model_parallel_size"), 2);
  EXPECT_TRUE(got.contains("np_scalar_array"));
}

// A resave writes the common state back: the Namespace stays a Namespace
// (Megatron's check_checkpoint_args uses getattr), bytes stay bytes, and the
// result reads back to the same JSON.
TEST(TorchSaveTest, ObjectsAndBytesAreWrittenBack) {
  nlohmann::json common =
      TorchLoadJson(ZipReader(Fixture("optimizer_common.pt"), "optimizer_common.pt"));
  common["raw"] = {{"__bytes__", "00ff7f80"}};
  common["not_allowed"] = {{"__object__", "os.system"}, {"args", {"ls"}}};
  const std::string saved = TorchSaveJson(common);
  EXPECT_EQ(TorchLoadJson(ZipReader(saved, "resaved")), common);
  ZipReader zip(saved, "resaved");
  PyTree tree = Unpickle(zip.ReadRecord(zip.Get("data.pkl")), "resaved");
  const PyValue* args = tree.root()->Get("args");
  ASSERT_EQ(args->kind, PyKind::kObject);
  EXPECT_TRUE(args->IsInstance("argparse", "Namespace"));
  EXPECT_EQ(tree.root()->Get("raw")->kind, PyKind::kBytes);
  EXPECT_EQ(tree.root()->Get("raw")->text, std::string("\x00\xff\x7f\x80", 4));
  EXPECT_EQ(tree.root()->Get("not_allowed")->kind, PyKind::kDict);  // never a call to os.system
}

// The `args` Megatron-Core 0.13 to 0.20 put in every checkpoint's common state
// (fixtures/pickles/megatron-args: each release's own parse_args /
// validate_args, torch.save): every class they hold is known, so each opens
// under --strict-globals too, with no unknown class noted.
TEST(TorchSaveTest, OpensTheArgsOfEveryMegatronRelease) {
  TakeUnknownGlobalNotes();
  int opened = 0;
  for (const char* release : {"0.13", "0.14", "0.15", "0.16", "0.17", "0.18", "0.19", "0.20"}) {
    SCOPED_TRACE(release);
    const std::string name = fmt::format("megatron-args/args-core_v{}.pt", release);
    const std::string bytes = Fixture(name);
    SetUnknownGlobalPolicy(UnknownGlobalPolicy::kRefuse);
    nlohmann::json got;
    EXPECT_NO_THROW(got = TorchLoadJson(ZipReader(bytes, name)));
    SetUnknownGlobalPolicy(UnknownGlobalPolicy::kCarry);
    ASSERT_TRUE(got.is_object());
    EXPECT_EQ(got.at("args").at("__object__"), "argparse.Namespace");
    EXPECT_TRUE(got.at("args").at("state").at("num_layers").is_number_integer());
    if (std::string_view(release) >= "0.16") {
      // args.exit_signal = signal.SIGTERM: REDUCE(signal.Signals, (15,)).
      EXPECT_EQ(got.at("args").at("state").at("exit_signal").at("__object__"), "signal.Signals");
      EXPECT_EQ(got.at("args").at("state").at("exit_signal").at("args").at(0), 15);
    }
    ++opened;
  }
  EXPECT_EQ(opened, 8);
  EXPECT_TRUE(TakeUnknownGlobalNotes().empty());
}

// A class no allow-list knows (a newer Megatron's, a user's) is carried:
// read with its name, arguments and state, noted with where it sits, and
// written back as the same class; --strict-globals refuses it.
TEST(TorchSaveTest, UnknownClassesAreCarriedNotedAndWrittenBack) {
  TakeUnknownGlobalNotes();
  nlohmann::json common =
      TorchLoadJson(ZipReader(Fixture("megatron-args/args-core_v0.20.pt"), "args.pt"));
  common["args"]["state"]["future_mode"] = {{"__object__", "megatron.core.future.enums.Mode"},
                                            {"args", {3}}};
  common["extra"] = {{"__object__", "mylib.config.RunConfig"},
                     {"args", nlohmann::json::array()},
                     {"state", {{"lr", 0.5}}}};
  const std::string saved = TorchSaveJson(common);
  ASSERT_TRUE(TakeUnknownGlobalNotes().empty());  // writing notes nothing
  EXPECT_EQ(TorchLoadJson(ZipReader(saved, "resaved.pt")), common);
  std::vector<UnknownGlobalNote> notes = TakeUnknownGlobalNotes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0].source, "resaved.pt: data.pkl");
  std::map<std::string, std::string> where;
  for (const UnknownGlobalNote& n : notes) where[n.global] = n.path;
  EXPECT_EQ(where["megatron.core.future.enums.Mode"], "args.future_mode");
  EXPECT_EQ(where["mylib.config.RunConfig"], "extra");
  EXPECT_THAT(DescribeUnknownGlobal(notes[0]), testing::HasSubstr("carried as opaque data"));
  SetUnknownGlobalPolicy(UnknownGlobalPolicy::kRefuse);
  EXPECT_THAT([&] { TorchLoadJson(ZipReader(saved, "resaved.pt")); },
              ThrowsError(ErrorKind::kUnsupported, "--strict-globals"));
  SetUnknownGlobalPolicy(UnknownGlobalPolicy::kCarry);
  TakeUnknownGlobalNotes();
}

TEST(TorchSaveTest, CodecsEncodeOnlyAsLatin1Bytes) {
  // _codecs.encode("x", "rot13") is refused, encode("\xff", "latin1") is bytes.
  PickleWriter bad;
  bad.Reduce([&] { bad.Global("_codecs", "encode"); }, 2,
             [&] {
               bad.Str("x");
               bad.Str("rot13");
             });
  EXPECT_THAT([&] { TorchLoadJson(ZipReader(Archive(bad.Finish(), ""), "bad")); },
              ThrowsError(ErrorKind::kUnsupported, "_codecs.encode"));
  PickleWriter good;
  good.Reduce([&] { good.Global("_codecs", "encode"); }, 2,
              [&] {
                good.Str("\xc3\xbf");  // U+00FF in UTF-8
                good.Str("latin1");
              });
  EXPECT_EQ(TorchLoadJson(ZipReader(Archive(good.Finish(), ""), "good")),
            nlohmann::json({{"__bytes__", "ff"}}));
}

TEST(TorchSaveTest, CyclesAreBoundedNotInfinite) {
  // x = []; x.append(x)
  const std::string cyclic = Archive(
      "\x80\x02]q\x00h\x00"
      "a."s,
      "");
  EXPECT_THAT([&] { TorchLoadJson(ZipReader(cyclic, "cycle")); },
              ThrowsError(ErrorKind::kCorruption, "nested deeper than"));
}

// Issue 15 defect 5: a ~200-byte data.pkl whose lists share references (10
// per level, 8 levels) expanded to 10^8 JSON values: gigabytes, then an
// uncaught std::bad_alloc.
TEST(TorchSaveTest, SharedReferenceBombIsBounded) {
  std::string pickle =
      "\x80\x02]q\x00"
      "0"s;  // L0 = [], memoized, popped
  for (int level = 1; level <= 8; ++level) {
    pickle += "]("s;
    for (int i = 0; i < 10; ++i) pickle += "h"s + static_cast<char>(level - 1);
    pickle += "eq"s + static_cast<char>(level);  // APPENDS, memoize
    if (level < 8) pickle += "0"s;
  }
  pickle += "."s;
  EXPECT_LT(pickle.size(), 300u);
  EXPECT_THAT([&] { TorchLoadJson(ZipReader(Archive(pickle, ""), "bomb")); },
              ThrowsError(ErrorKind::kCorruption, "bomb: data.pkl expands to more than"));
  // Sharing that stays small still loads: [[], [], []] with one shared [].
  const std::string shared =
      "\x80\x02]q\x00"
      "0](h\x00h\x00h\x00"
      "e."s;
  EXPECT_EQ(TorchLoadJson(ZipReader(Archive(shared, ""), "small")),
            nlohmann::json::parse("[[], [], []]"));
}

}  // namespace
}  // namespace distckpt
