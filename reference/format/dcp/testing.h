// Test helpers of the DCP tests: fixture paths, whole-tensor reads through a
// CheckpointReader, the value formulas of fixtures/dcp (expected.json), and
// file surgery for corruption tests. For *_test.cc files only.
#ifndef DISTCKPT_FORMAT_DCP_TESTING_H_
#define DISTCKPT_FORMAT_DCP_TESTING_H_

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "format/dcp/pickler.h"
#include "format/format.h"
#include "io/testing.h"

namespace distckpt {

inline std::string DcpFixture(const std::string& relative) {
  return std::string(DISTCKPT_DCP_FIXTURES) + "/" + relative;
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Copies the files of `from` into a fresh directory `to` (flat directories only).
inline void CopyDir(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(to);
  for (const auto& entry : std::filesystem::directory_iterator(from)) {
    std::filesystem::copy_file(entry.path(), to + "/" + entry.path().filename().string());
  }
}

// data.pkl of torch.save(view): _rebuild_tensor_v2 of a FloatStorage of
// `numel` elements (record data/0) viewed with `offset`, `size`, `stride`.
inline std::string RebuildTensorPickle(int64_t numel, int64_t offset, const Shape& size,
                                       const Shape& stride) {
  PickleWriter w;
  w.Reduce([&] { w.Global("torch._utils", "_rebuild_tensor_v2"); }, 6,
           [&] {
             w.Tuple(5, [&] {
               w.Str("storage");
               w.Global("torch", "FloatStorage");
               w.Str("0");
               w.Str("cpu");
               w.Int(numel);
             });
             w.BinPersId();
             w.Int(offset);
             w.TupleOfInts(size);
             w.TupleOfInts(stride);
             w.Bool(false);
             w.Reduce([&] { w.Global("collections", "OrderedDict"); }, 0, [] {});
           });
  return w.Finish();
}

// The whole global tensor, row-major, read chunk by chunk.
inline std::vector<std::byte> ReadGlobal(CheckpointReader& reader, const StoredTensor& t,
                                         VerifyPolicy policy = VerifyPolicy::kWhenWhole) {
  const size_t es = DTypeSize(t.dtype);
  std::vector<std::byte> out(static_cast<size_t>(Volume(t.global_shape)) * es);
  const Box global{Shape(t.global_shape.size(), 0), t.global_shape};
  for (const StoredChunk& c : t.chunks) {
    std::vector<ReadRun> runs;
    ForEachCopyRun(c.box, c.flat, global, std::nullopt, c.box, [&](const CopyRun& r) {
      runs.push_back({static_cast<uint64_t>(r.a_index) * es, static_cast<uint64_t>(r.count) * es,
                      out.data() + static_cast<size_t>(r.b_index) * es});
    });
    reader.ReadChunk(t, c, runs, policy);
  }
  return out;
}

// The fixtures' value formulas ("values" in expected.json), element i.
inline double FixtureValue(const std::string& formula, int64_t i) {
  if (formula == "v(i) = i * 0.5") return static_cast<double>(i) * 0.5;
  if (formula.starts_with("v(i) = i * 0.25 - 1")) return static_cast<double>(i) * 0.25 - 1;
  if (formula == "2.5") return 2.5;
  ADD_FAILURE() << "unknown formula " << formula;
  return 0;
}

inline int64_t FixtureI64(int64_t i) { return i * 1000000007 - 3; }

// Element i of a buffer of `dtype`, exactly (int64 without a double round trip).
inline bool ElementEquals(const std::vector<std::byte>& data, DType dtype, size_t i,
                          const std::string& formula) {
  if (dtype == DType::kI64) {
    int64_t v;
    std::memcpy(&v, data.data() + i * 8, 8);
    return v == FixtureI64(static_cast<int64_t>(i));
  }
  return LoadAsDouble(data.data(), dtype, i) == FixtureValue(formula, static_cast<int64_t>(i));
}

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_TESTING_H_
