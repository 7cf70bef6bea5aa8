#include "format/dcp/pickler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "format/dcp/unpickler.h"

namespace distckpt {
namespace {

using namespace std::string_literals;

std::string Body(const std::function<void(PickleWriter&)>& emit) {
  PickleWriter w;
  emit(w);
  std::string out = w.Finish();
  EXPECT_EQ(out.substr(0, 2), "\x80\x02");
  EXPECT_EQ(out.back(), '.');
  return out.substr(2, out.size() - 3);
}

TEST(PickleWriterTest, IntegersAreEncodedAsPythonDoes) {
  // pickle.dumps(v, 2) of CPython 3.11.
  const std::pair<int64_t, std::string> cases[] = {
      {0, "K\x00"s},
      {255, "K\xff"s},
      {256, "M\x00\x01"s},
      {65535, "M\xff\xff"s},
      {65536, "J\x00\x00\x01\x00"s},
      {-1, "J\xff\xff\xff\xff"s},
      {INT32_MIN, "J\x00\x00\x00\x80"s},
      {int64_t{1} << 31, "\x8a\x05\x00\x00\x00\x80\x00"s},
      {-(int64_t{1} << 31) - 1, "\x8a\x05\xff\xff\xff\x7f\xff"s},
      {INT64_MAX, "\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f"s},
  };
  for (const auto& [value, bytes] : cases) {
    EXPECT_EQ(Body([&](PickleWriter& w) { w.Int(value); }), bytes) << value;
  }
  EXPECT_EQ(Body([](PickleWriter& w) { w.UInt(UINT64_MAX); }),
            "\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00"s);
  EXPECT_EQ(Body([](PickleWriter& w) { w.Float(0.1); }), "G?\xb9\x99\x99\x99\x99\x99\x9a"s);
  EXPECT_EQ(Body([](PickleWriter& w) { w.Str("\xc3\xa9"); }), "X\x02\x00\x00\x00\xc3\xa9"s);
}

TEST(PickleWriterTest, EveryIntegerReadsBack) {
  for (int64_t v : {INT64_MIN, INT64_MIN + 1, int64_t{-1} << 47, int64_t{1} << 56, int64_t{-129}}) {
    PickleWriter w;
    w.Int(v);
    PyTree tree = Unpickle(w.Finish(), "int");
    EXPECT_EQ(tree.root()->integer, v);
  }
}

TEST(PickleWriterTest, TuplesUseTheShortestOpcode) {
  EXPECT_EQ(Body([](PickleWriter& w) { w.TupleOfInts({}); }), ")");
  EXPECT_EQ(Body([](PickleWriter& w) { w.TupleOfInts({1}); }), "K\x01\x85"s);
  EXPECT_EQ(Body([](PickleWriter& w) { w.TupleOfInts({1, 2, 3}); }), "K\x01K\x02K\x03\x87"s);
  EXPECT_EQ(Body([](PickleWriter& w) { w.TupleOfInts({1, 2, 3, 4}); }), "(K\x01K\x02K\x03K\x04t"s);
  EXPECT_EQ(Body([](PickleWriter& w) { w.TorchSize({5}); }), "ctorch\nSize\nK\x05\x85\x85R"s);
}

TEST(PickleWriterTest, JsonRoundTripsThroughTheUnpickler) {
  const nlohmann::json value = {{"a", {1, -2, 3.5, nullptr, true}},
                                {"b", {{"c", "d"}}},
                                {"e", nlohmann::json::object()},
                                {"f", nlohmann::json::array()},
                                {"u", UINT64_MAX}};
  PickleWriter w;
  w.Json(value);
  PyTree tree = Unpickle(w.Finish(), "json");
  const PyValue& root = *tree.root();
  ASSERT_EQ(root.kind, PyKind::kDict);
  const PyValue* a = root.Get("a");
  ASSERT_EQ(a->kind, PyKind::kList);
  EXPECT_EQ(a->items[1]->integer, -2);
  EXPECT_EQ(a->items[2]->real, 3.5);
  EXPECT_EQ(a->items[3]->kind, PyKind::kNone);
  EXPECT_TRUE(a->items[4]->boolean);
  EXPECT_EQ(root.Get("b")->Get("c")->text, "d");
  EXPECT_EQ(root.Get("e")->kind, PyKind::kDict);
  EXPECT_EQ(root.Get("f")->kind, PyKind::kList);
  EXPECT_EQ(root.Get("u")->uinteger, UINT64_MAX);
}

}  // namespace
}  // namespace distckpt
