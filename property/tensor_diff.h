// Global-space comparison of the tensors of two committed checkpoints: the
// same keys and, per key, the same dtype, global shape and bytes, whatever
// the layouts that wrote them (read with LoadPlainTensors). Objects and
// common state are not compared.
//
// Thread-safety: pure function of the two directories.
#ifndef DISTCKPT_PROPERTY_TENSOR_DIFF_H_
#define DISTCKPT_PROPERTY_TENSOR_DIFF_H_

#include <string>
#include <vector>

namespace distckpt {

// One line per difference ("key 't0': element 17 differs: 1.5 vs 0"), at most
// `max_lines`; empty when the checkpoints hold the same tensors.
std::vector<std::string> DiffGlobalTensors(const std::string& a, const std::string& b,
                                         size_t max_lines = 5);

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_TENSOR_DIFF_H_
