// AutoOrder's search: which orders of a segment's units are legal, what each would cost per the
// cost model, and the cheapest one.
//
// Legality: unit j may end up before unit i (i < j as written) only when the two commute (strict
// mode: exactly; relaxed: exactly or approximately). The legal orders are the linear extensions of
// "must stay before"; barriers, pinned units, field dependencies and cardinality changes never
// appear inside a segment, so they are never crossed.
//
// Cost model: each unit was measured in the order as written (CPU per element it processed, the
// size of every field before and after it, the fraction of elements it kept). Placed elsewhere,
// its cost scales with the bytes it then sees (what its declaration says drives its cost: input
// bytes, output bytes or nothing) and the fraction of elements still alive; the fields it writes
// change as declared (same size, fixed by arguments, scaled, or as measured), and a unit that drops
// elements changes the survivors' average field sizes as it did when measured (a length filter
// drops the long ones). The predicted cost
// of an order is the sum over its units, per input element of the segment; the output element
// count does not depend on the order, so this also ranks CPU per output element.
//
// Search: dynamic programming over subsets for segments of up to kMaxExactUnits units (exact for
// the model), a greedy order with one step of look-ahead beyond.
//
// Pure functions; thread-compatible.
#ifndef SLUICE_DATAPLANE_PIPELINE_AUTOORDER_ORDER_OPTIMIZER_H_
#define SLUICE_DATAPLANE_PIPELINE_AUTOORDER_ORDER_OPTIMIZER_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "dataplane/pipeline/op_properties.h"

namespace sluice::pipeline::autoorder {

inline constexpr size_t kMaxExactUnits = 12;

// The average size of one field per element: number of values and bytes per value (strings: their
// bytes, 1 per value).
struct FieldSize {
  double values = 0;
  double value_bytes = 1;
  double bytes() const { return values * value_bytes; }
};
using FieldSizes = std::map<std::string, FieldSize>;

// One unit measured in the order as written.
struct UnitProfile {
  double cpu_ns = 0;       // per element it processed
  double keep = 1;         // elements out / in
  FieldSizes in, out;      // averages over the elements it processed / produced
  int64_t elements_in = 0;
};

// What the search needs about one segment.
struct SegmentModel {
  std::vector<OrderProperties> units;   // as written
  std::vector<UnitProfile> profiles;    // parallel to units
  FieldSizes input;                     // the segment's input
};

enum class Exactness { kExactOnly, kApproximateToo };

// before[i][j]: unit i must stay before unit j (i < j as written, and they do not commute).
std::vector<std::vector<bool>> MustStayBefore(const std::vector<OrderProperties>& units, Exactness exactness);
// Whether `order` (a permutation of 0..n-1) keeps every must-stay-before pair.
bool IsLegalOrder(const std::vector<std::vector<bool>>& before, const std::vector<size_t>& order);

// Predicted CPU nanoseconds per input element of the segment for `order`; `per_unit` (optional)
// receives each unit's share, indexed by unit.
double PredictCost(const SegmentModel& model, const std::vector<size_t>& order, std::vector<double>* per_unit = nullptr);

struct OrderChoice {
  std::vector<size_t> order;   // the cheapest legal order found (identity when nothing is cheaper)
  double cost = 0;             // its predicted cost
  double original_cost = 0;    // the order as written, predicted
  bool exhaustive = true;      // false: greedy search (segment longer than kMaxExactUnits)
};

// The cheapest legal order. Ties and near-ties (within a relative `min_gain`) keep the order as
// written.
OrderChoice FindBestOrder(const SegmentModel& model, Exactness exactness, double min_gain);

}  // namespace sluice::pipeline::autoorder

#endif  // SLUICE_DATAPLANE_PIPELINE_AUTOORDER_ORDER_OPTIMIZER_H_
