// Tests of the Python-style formatting; the numpy strings were printed by
// numpy 1.24 (str(array)).
#include "mapping/py_format.h"

#include <gtest/gtest.h>

namespace distckpt {
namespace {

std::string Numpy(const Shape& shape, const std::vector<int64_t>& values) {
  return NumpyIntArrayStr(shape, [&](int64_t i) { return values[i]; });
}

std::string NumpyRange(const Shape& shape) {
  return NumpyIntArrayStr(shape, [](int64_t i) { return i; });
}

TEST(PyFormatTest, Reprs) {
  EXPECT_EQ(PyRepr("abc"), "'abc'");
  EXPECT_EQ(PyRepr("it's"), "\"it's\"");
  EXPECT_EQ(PyRepr("a'b\"c\n"), "'a\\'b\"c\\n'");
  EXPECT_EQ(PyTuple({}), "()");
  EXPECT_EQ(PyTuple({"'a'"}), "('a',)");
  EXPECT_EQ(PyTuple({"'a'", "0"}), "('a', 0)");
  EXPECT_EQ(PyList({"1", "2"}), "[1, 2]");
  EXPECT_EQ(PyStrSet({}), "set()");
  EXPECT_EQ(PyStrSet({"b", "a"}), "{'a', 'b'}");
}

TEST(PyFormatTest, SmallArrays) {
  EXPECT_EQ(Numpy({3}, {1, 0, 1}), "[1 0 1]");
  EXPECT_EQ(Numpy({2, 2}, {1, 0, 1, 2}), "[[1 0]\n [1 2]]");
  EXPECT_EQ(Numpy({2, 2}, {1, 10, 0, 2}), "[[ 1 10]\n [ 0  2]]");
  EXPECT_EQ(Numpy({2, 2}, {-1, 5, 0, 12}), "[[-1  5]\n [ 0 12]]");
  EXPECT_EQ(Numpy({2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0}), "[[[0 0]\n  [0 0]]\n\n [[0 0]\n  [0 0]]]");
  EXPECT_EQ(Numpy({}, {7}), "7");
  EXPECT_EQ(Numpy({0}, {}), "[]");
}

TEST(PyFormatTest, LongRowsWrapAt75Columns) {
  EXPECT_EQ(NumpyRange({40}),
            "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n"
            " 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39]");
  EXPECT_EQ(NumpyRange({2, 30}),
            "[[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n"
            "  24 25 26 27 28 29]\n"
            " [30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53\n"
            "  54 55 56 57 58 59]]");
}

TEST(PyFormatTest, LargeArraysAreSummarised) {
  EXPECT_EQ(NumpyIntArrayStr({1001}, [](int64_t) { return 1; }), "[1 1 1 ... 1 1 1]");
  EXPECT_EQ(NumpyRange({2000}), "[   0    1    2 ... 1997 1998 1999]");
  EXPECT_EQ(NumpyIntArrayStr({40, 40}, [](int64_t) { return 1; }),
            "[[1 1 1 ... 1 1 1]\n [1 1 1 ... 1 1 1]\n [1 1 1 ... 1 1 1]\n ...\n"
            " [1 1 1 ... 1 1 1]\n [1 1 1 ... 1 1 1]\n [1 1 1 ... 1 1 1]]");
  const std::string cube = NumpyRange({10, 10, 20});
  EXPECT_EQ(cube.substr(0, 75),
            "[[[   0    1    2 ...   17   18   19]\n  [  20   21   22 ...   37   38   39]");
  EXPECT_NE(cube.find("  [ 580  581  582 ...  597  598  599]]\n\n ...\n\n [[1400 1401 1402 ... "
                      "1417 1418 1419]"),
            std::string::npos);
  EXPECT_EQ(cube.substr(cube.size() - 37), "[1980 1981 1982 ... 1997 1998 1999]]]");
}

}  // namespace
}  // namespace distckpt
