#include "dataplane/pipeline/autoorder/order_optimizer.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace sluice::pipeline::autoorder {
namespace {

// The model's view of an element at some point of the segment.
struct State {
  FieldSizes fields;
  double rate = 1;  // fraction of the segment's input elements still alive
};

bool Touches(const OrderProperties& p, const std::string& field) {
  return p.reads_all || p.writes_all || p.reads.count(field) != 0 || p.writes.count(field) != 0;
}

bool Writes(const OrderProperties& p, const std::string& field) { return p.writes_all || p.writes.count(field) != 0; }

double BytesOf(const FieldSizes& fields, const OrderProperties& p, bool written_only) {
  double total = 0;
  for (const auto& [name, size] : fields) {
    if (written_only ? Writes(p, name) : Touches(p, name)) total += size.bytes();
  }
  return total;
}

double Ratio(double now, double measured) { return measured > 0 ? now / measured : 1.0; }

// Applies unit `u` to `state`; returns its cost per segment input element.
double Apply(const SegmentModel& model, size_t u, State* state) {
  const OrderProperties& p = model.units[u];
  const UnitProfile& prof = model.profiles[u];
  const OrderDeclaration& d = *p.declaration;
  const double in_bytes = BytesOf(state->fields, p, false);

  FieldSizes out;
  for (const auto& [name, size] : state->fields) {
    if (Writes(p, name)) continue;
    out[name] = size;  // untouched
    // A unit that drops elements may drop the big ones (a length filter): the survivors' average
    // size changes as it did when measured.
    auto before = prof.in.find(name);
    auto after = prof.out.find(name);
    if (prof.keep < 1 && before != prof.in.end() && after != prof.out.end() && before->second.values > 0) {
      out[name].values *= after->second.values / before->second.values;
    }
  }
  for (const auto& [name, measured] : prof.out) {
    // A field the unit does not write is as the state has it (or absent: made by a unit still to come).
    if (!Writes(p, name)) continue;
    auto before = state->fields.find(name);
    FieldSize now = measured;
    if (before != state->fields.end()) {
      const FieldSize& in = before->second;
      switch (d.shape) {
        case ShapeEffect::kSame: now.values = in.values; break;
        case ShapeEffect::kScaled: {
          auto measured_in = prof.in.find(name);
          now.values = measured_in != prof.in.end() && measured_in->second.values > 0
                           ? in.values * measured.values / measured_in->second.values
                           : measured.values;
          break;
        }
        case ShapeEffect::kFixed:
        case ShapeEffect::kData: now.values = measured.values; break;
      }
      now.value_bytes = p.output_dtype ? static_cast<double>(DTypeSize(*p.output_dtype)) : in.value_bytes;
      if (p.output_dtype && *p.output_dtype == DType::kString) now.value_bytes = measured.value_bytes;
    }
    out[name] = now;
  }
  const double out_bytes = BytesOf(out, p, true);

  double cost = prof.cpu_ns;
  switch (d.cost) {
    case CostDriver::kInput: cost *= Ratio(in_bytes, BytesOf(prof.in, p, false)); break;
    case CostDriver::kOutput: cost *= Ratio(out_bytes, BytesOf(prof.out, p, true)); break;
    case CostDriver::kConstant: break;
  }
  const double weighted = cost * state->rate;
  state->fields = std::move(out);
  state->rate *= prof.keep;
  return weighted;
}

std::vector<size_t> Identity(size_t n) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

// Predecessor masks: bit i of pred[j] set when unit i must come before unit j (transitively closed).
std::vector<uint64_t> PredecessorMasks(const std::vector<std::vector<bool>>& before) {
  const size_t n = before.size();
  std::vector<uint64_t> pred(n, 0);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < j; ++i) {
      if (before[i][j]) pred[j] |= (uint64_t{1} << i) | pred[i];
    }
  }
  return pred;
}

OrderChoice DynamicProgram(const SegmentModel& model, const std::vector<std::vector<bool>>& before) {
  const size_t n = model.units.size();
  const std::vector<uint64_t> pred = PredecessorMasks(before);
  const size_t full = (size_t{1} << n) - 1;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> best(full + 1, kInf);
  std::vector<int> last(full + 1, -1);
  std::vector<State> states(full + 1);
  best[0] = 0;
  states[0].fields = model.input;
  // Masks in increasing order: every subset of a mask is smaller than it.
  for (size_t mask = 0; mask < full; ++mask) {
    if (best[mask] == kInf) continue;
    for (size_t u = 0; u < n; ++u) {
      const uint64_t bit = uint64_t{1} << u;
      if ((mask & bit) != 0 || (pred[u] & ~mask) != 0) continue;
      State s = states[mask];
      double cost = best[mask] + Apply(model, u, &s);
      const size_t next = mask | bit;
      // Strictly cheaper wins; among equals the first found (lowest unit index next) stays,
      // which favours the order as written.
      if (cost < best[next]) {
        best[next] = cost;
        last[next] = static_cast<int>(u);
        states[next] = std::move(s);
      }
    }
  }
  OrderChoice choice;
  for (size_t mask = full; mask != 0;) {
    const int u = last[mask];
    choice.order.push_back(static_cast<size_t>(u));
    mask &= ~(size_t{1} << u);
  }
  std::reverse(choice.order.begin(), choice.order.end());
  choice.cost = best[full];
  return choice;
}

OrderChoice Greedy(const SegmentModel& model, const std::vector<std::vector<bool>>& before) {
  const size_t n = model.units.size();
  std::vector<bool> done(n, false);
  State state;
  state.fields = model.input;
  OrderChoice choice;
  choice.exhaustive = false;
  auto available = [&](size_t u) {
    if (done[u]) return false;
    for (size_t i = 0; i < n; ++i) {
      if (before[i][u] && !done[i]) return false;
    }
    return true;
  };
  for (size_t step = 0; step < n; ++step) {
    double best = std::numeric_limits<double>::infinity();
    size_t pick = n;
    for (size_t u = 0; u < n; ++u) {
      if (!available(u)) continue;
      State s = state;
      double cost = Apply(model, u, &s);
      // One step of look-ahead: what every remaining unit would cost right after this one.
      for (size_t r = 0; r < n; ++r) {
        if (done[r] || r == u) continue;
        State t = s;
        cost += Apply(model, r, &t);
      }
      if (cost < best) {
        best = cost;
        pick = u;
      }
    }
    choice.cost += Apply(model, pick, &state);
    done[pick] = true;
    choice.order.push_back(pick);
  }
  return choice;
}

}  // namespace

std::vector<std::vector<bool>> MustStayBefore(const std::vector<OrderProperties>& units, Exactness exactness) {
  const size_t n = units.size();
  std::vector<std::vector<bool>> before(n, std::vector<bool>(n, false));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      std::optional<Commutation> c = Commute(units[i], units[j]);
      before[i][j] = !c.has_value() || (!c->exact && exactness == Exactness::kExactOnly);
    }
  }
  return before;
}

bool IsLegalOrder(const std::vector<std::vector<bool>>& before, const std::vector<size_t>& order) {
  const size_t n = before.size();
  if (order.size() != n) return false;
  std::vector<size_t> position(n, n);
  for (size_t k = 0; k < n; ++k) {
    if (order[k] >= n || position[order[k]] != n) return false;
    position[order[k]] = k;
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (before[i][j] && position[i] > position[j]) return false;
    }
  }
  return true;
}

double PredictCost(const SegmentModel& model, const std::vector<size_t>& order, std::vector<double>* per_unit) {
  State state;
  state.fields = model.input;
  double total = 0;
  if (per_unit != nullptr) per_unit->assign(model.units.size(), 0.0);
  for (size_t u : order) {
    double c = Apply(model, u, &state);
    if (per_unit != nullptr) (*per_unit)[u] = c;
    total += c;
  }
  return total;
}

OrderChoice FindBestOrder(const SegmentModel& model, Exactness exactness, double min_gain) {
  const size_t n = model.units.size();
  const std::vector<size_t> written = Identity(n);
  const double original = PredictCost(model, written);
  const auto before = MustStayBefore(model.units, exactness);
  OrderChoice choice = n <= kMaxExactUnits ? DynamicProgram(model, before) : Greedy(model, before);
  choice.original_cost = original;
  if (!(choice.cost < original * (1.0 - min_gain)) || !IsLegalOrder(before, choice.order)) {
    const bool exhaustive = choice.exhaustive;
    choice = OrderChoice{written, original, original, exhaustive};
  }
  return choice;
}

}  // namespace sluice::pipeline::autoorder
