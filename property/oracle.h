// Element-by-element oracles: deliberately naive (one element at a time, no
// run or box arithmetic from core/), so that they share no logic with the
// code they check.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_PROPERTY_ORACLE_H_
#define DISTCKPT_PROPERTY_ORACLE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/box.h"
#include "mapping/sharded_tensor.h"

namespace distckpt {

// Calls fn(global position) for every element of `box` in row-major order;
// with `flat`, only for the elements [flat->start, flat->stop) of that order.
void ForEachPosition(const Box& box, const std::optional<FlatRange>& flat,
                     const std::function<void(const Shape&)>& fn);

// Row-major index of `pos` in `box`, or -1 when it lies outside.
int64_t IndexIn(const Box& box, const Shape& pos);

// IndexIn for the box [0, shape).
int64_t IndexInShape(const Shape& shape, const Shape& pos);

// Do the main replicas among `ranks`' shards of `key` cover its global
// tensor exactly once, with nothing outside? (Every shard of a key has the
// same global shape: the layouts come from one tensor spec.)
bool MainReplicasTile(const std::vector<std::vector<ShardedTensor>>& ranks, const std::string& key);

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_ORACLE_H_
