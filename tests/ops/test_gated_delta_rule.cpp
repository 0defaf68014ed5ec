// Qwen3-Next's Gated DeltaNet CPU ops (ops/gated_delta_rule.h) and the gate-after-norm placement of the gated
// RMSNorm (ops/mamba2.h). The forward against a naive double-precision recurrence written here (key heads shared
// by 1, 2 and 4 value heads, Dk ≠ Dv, odd sizes, packed documents), against a double port of transformers'
// chunked algorithm (with documents inside its chunks, the layout a chunked kernel will run) and against a small
// table transformers itself computed; packed documents and state
// continuation bit for bit; every gradient against central differences of the double recurrence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gradcheck_util.h"
#include "moetune/ops/gated_delta_rule.h"
#include "moetune/ops/mamba2.h"

namespace moetune::ops {
namespace {

// ---- The naive recurrence, in double ----

std::vector<double> doubles(const Tensor& t) {
  return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
}

// The op's inputs and parameters as doubles, for the reference and its finite differences.
struct Values {
  std::vector<double> q, k, v, a, b, dt_bias, a_log;
};

Values values_of(const GatedDeltaInputs& in, const GatedDeltaParams& params) {
  return {doubles(in.q), doubles(in.k),           doubles(in.v),        doubles(in.a),
          doubles(in.b), doubles(params.dt_bias), doubles(params.a_log)};
}

// One token's q or k head, l2-normalized as transformers' l2norm: x / sqrt(Σ x² + 1e-6), times `scale`.
std::vector<double> l2norm(const double* x, int64_t dim, double scale) {
  double squares = 0;
  for (int64_t i = 0; i < dim; ++i) squares += x[i] * x[i];
  std::vector<double> out(static_cast<size_t>(dim));
  for (int64_t i = 0; i < dim; ++i) out[size_t(i)] = x[i] / std::sqrt(squares + 1e-6) * scale;
  return out;
}

double softplus(double u) { return u > 20 ? u : std::log1p(std::exp(u)); }

// The token's normalized query and key for value head h, its beta and log-decay g.
struct Token {
  std::vector<double> q, k;
  double beta, g;
};

Token token(const Values& x, const GatedDeltaShape& s, int64_t n, int64_t h) {
  const int64_t kh = h * s.num_k_heads / s.num_v_heads;  // repeat_interleave: value heads h·Hk/Hv share a key head
  const int64_t at = (n * s.num_k_heads + kh) * s.k_head_dim, hv = n * s.num_v_heads + h;
  return {l2norm(&x.q[size_t(at)], s.k_head_dim, 1.0 / std::sqrt(double(s.k_head_dim))),
          l2norm(&x.k[size_t(at)], s.k_head_dim, 1.0), 1.0 / (1.0 + std::exp(-x.b[size_t(hv)])),
          -std::exp(x.a_log[size_t(h)]) * softplus(x.a[size_t(hv)] + x.dt_bias[size_t(h)])};
}

// out [N, Hv·Dv] by the recurrence as transformers' torch_recurrent_gated_delta_rule writes it, one value head at a
// time. `state` [Hv, Dk, Dv]: the initial state if non-empty (used unless row 0 starts a document), the final one
// on return.
std::vector<double> naive_forward(const Values& x, const GatedDeltaShape& s, const DocumentStarts& starts,
                                  std::vector<double>* state = nullptr) {
  const int64_t rows = int64_t(starts.size()), dk = s.k_head_dim, dv = s.v_head_dim;
  std::vector<double> out(size_t(rows * s.num_v_heads * dv)), final_state;
  for (int64_t h = 0; h < s.num_v_heads; ++h) {
    std::vector<std::vector<double>> S(size_t(dk), std::vector<double>(size_t(dv), 0.0));
    if (state && !state->empty())
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) S[size_t(i)][size_t(j)] = (*state)[size_t((h * dk + i) * dv + j)];
    for (int64_t n = 0; n < rows; ++n) {
      if (starts[size_t(n)]) S.assign(size_t(dk), std::vector<double>(size_t(dv), 0.0));
      const Token t = token(x, s, n, h);
      const double* v = &x.v[size_t((n * s.num_v_heads + h) * dv)];
      for (auto& row : S)
        for (double& e : row) e *= std::exp(t.g);
      for (int64_t j = 0; j < dv; ++j) {
        double memory = 0;
        for (int64_t i = 0; i < dk; ++i) memory += S[size_t(i)][size_t(j)] * t.k[size_t(i)];
        const double delta = (v[j] - memory) * t.beta;
        for (int64_t i = 0; i < dk; ++i) S[size_t(i)][size_t(j)] += t.k[size_t(i)] * delta;
      }
      for (int64_t j = 0; j < dv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < dk; ++i) o += S[size_t(i)][size_t(j)] * t.q[size_t(i)];
        out[size_t((n * s.num_v_heads + h) * dv + j)] = o;
      }
    }
    for (const auto& row : S) final_state.insert(final_state.end(), row.begin(), row.end());
  }
  if (state) *state = final_state;
  return out;
}

// ---- transformers' chunked algorithm (torch_chunk_gated_delta_rule), ported to double ----

using Matrix = std::vector<std::vector<double>>;

Matrix matrix(size_t rows, size_t cols) { return Matrix(rows, std::vector<double>(cols, 0.0)); }

// Solves (I + strictly_lower(a)) · x = rhs in place (solve_triangular with unitriangular=True ignores the diagonal).
void solve_unit_lower(const Matrix& a, Matrix& rhs) {
  for (size_t i = 0; i < rhs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      for (size_t c = 0; c < rhs[i].size(); ++c) rhs[i][c] -= a[i][j] * rhs[j][c];
}

// All rows, chunks of `chunk` tokens (the last one shorter: transformers pads it with zero tokens, which neither read
// nor write anything earlier rows see). `state` as naive_forward's. transformers' decays within a chunk are
// exp(cum_r − cum_m) of the cumulative log-decays; here they are the products of exp(g) over the rows between, equal
// in exact arithmetic, so that a document start (`starts`, its decay 0: the op's restart) cuts everything before it
// inside a chunk too: how a chunked kernel runs packed rows without cutting its chunks at documents.
std::vector<double> chunked_forward(const Values& x, const GatedDeltaShape& s, int64_t rows, int64_t chunk,
                                    std::vector<double>* state = nullptr, const DocumentStarts& starts = {}) {
  const size_t dk = size_t(s.k_head_dim), dv = size_t(s.v_head_dim);
  std::vector<double> out(size_t(rows * s.num_v_heads) * dv), final_state;
  for (int64_t h = 0; h < s.num_v_heads; ++h) {
    Matrix S = matrix(dk, dv);
    if (state && !state->empty())
      for (size_t i = 0; i < dk; ++i)
        for (size_t j = 0; j < dv; ++j) S[i][j] = (*state)[(size_t(h) * dk + i) * dv + j];
    for (int64_t first = 0; first < rows; first += chunk) {
      const size_t c = size_t(std::min(chunk, rows - first));
      std::vector<Token> t;
      std::vector<double> a(c);  // the rows' decays: exp(g), 0 where a document starts
      Matrix v = matrix(c, dv);
      for (size_t r = 0; r < c; ++r) {
        t.push_back(token(x, s, first + int64_t(r), h));
        const bool restart = !starts.empty() && starts[size_t(first) + r];
        a[r] = restart ? 0.0 : std::exp(t[r].g);
        for (size_t j = 0; j < dv; ++j)
          v[r][j] = x.v[(size_t(first) + r) * size_t(s.num_v_heads) * dv + size_t(h) * dv + j];
      }
      // The decay from after row m to row r (1 when m = r), and from the chunk's start through row r.
      auto decay = [&](size_t r, size_t m) {
        double product = 1;
        for (size_t p = m + 1; p <= r; ++p) product *= a[p];
        return product;
      };
      auto from_start = [&](size_t r) { return a[0] * decay(r, 0); };
      auto dot = [&](const std::vector<double>& p, const std::vector<double>& q) {
        double total = 0;
        for (size_t i = 0; i < dk; ++i) total += p[i] * q[i];
        return total;
      };
      // ut_system[r][m] = beta_r (k_r · k_m) decay(r, m) below the diagonal; the intra-chunk attention
      // (q_r · k_m) decay(r, m) on and below it.
      Matrix ut = matrix(c, c), attn = matrix(c, c), new_values = matrix(c, dv), k_cumdecay = matrix(c, dk);
      for (size_t r = 0; r < c; ++r) {
        for (size_t m = 0; m <= r; ++m) {
          ut[r][m] = t[r].beta * dot(t[r].k, t[m].k) * decay(r, m);
          attn[r][m] = dot(t[r].q, t[m].k) * decay(r, m);
        }
        for (size_t j = 0; j < dv; ++j) new_values[r][j] = v[r][j] * t[r].beta;
        for (size_t i = 0; i < dk; ++i) k_cumdecay[r][i] = t[r].k[i] * t[r].beta * from_start(r);
      }
      solve_unit_lower(ut, new_values);
      solve_unit_lower(ut, k_cumdecay);
      // v_new = new_values − k_cumdecay · S; out = (q · from_start) · S + attn · v_new.
      Matrix v_new = new_values;
      for (size_t r = 0; r < c; ++r)
        for (size_t j = 0; j < dv; ++j)
          for (size_t i = 0; i < dk; ++i) v_new[r][j] -= k_cumdecay[r][i] * S[i][j];
      for (size_t r = 0; r < c; ++r)
        for (size_t j = 0; j < dv; ++j) {
          double o = 0;
          for (size_t i = 0; i < dk; ++i) o += t[r].q[i] * from_start(r) * S[i][j];
          for (size_t m = 0; m <= r; ++m) o += attn[r][m] * v_new[m][j];
          out[((size_t(first) + r) * size_t(s.num_v_heads) + size_t(h)) * dv + j] = o;
        }
      // S = S · from_start(last) + (k · decay(last, r))ᵀ · v_new.
      for (size_t i = 0; i < dk; ++i)
        for (size_t j = 0; j < dv; ++j) {
          S[i][j] *= from_start(c - 1);
          for (size_t r = 0; r < c; ++r) S[i][j] += t[r].k[i] * decay(c - 1, r) * v_new[r][j];
        }
    }
    for (const auto& row : S) final_state.insert(final_state.end(), row.begin(), row.end());
  }
  if (state) *state = final_state;
  return out;
}

// ---- Helpers ----

struct Problem {
  GatedDeltaInputs in;
  GatedDeltaParams params;
};

// Random inputs at the scales a trained model sees: q, k of any norm (l2norm removes it), A_log around 0 and
// dt_bias around 0 so that the decays exp(g) spread over (0, 1).
Problem random_problem(const GatedDeltaShape& s, int64_t rows) {
  const int64_t key = s.num_k_heads * s.k_head_dim, value = s.num_v_heads * s.v_head_dim;
  return {{random({rows, key}, 2.0f), random({rows, key}, 2.0f), random({rows, value}), random({rows, s.num_v_heads}),
           random({rows, s.num_v_heads})},
          {random({s.num_v_heads}, 0.5f), random({s.num_v_heads}, 0.5f)}};
}

// max |got − want| / max |want|. The fp32 ops against double references land near 1e-7; the checks allow 2e-6.
double relative_error(const Tensor& got, const std::vector<double>& want) {
  EXPECT_EQ(size_t(got.numel()), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double(got.data<float>()[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return diff / scale;
}

DocumentStarts one_document(int64_t rows) {
  DocumentStarts starts(size_t(rows), 0);
  starts[0] = 1;
  return starts;
}

Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.narrow(first, count).clone(); }

GatedDeltaInputs rows_of(const GatedDeltaInputs& in, int64_t first, int64_t count) {
  return {rows_of(in.q, first, count), rows_of(in.k, first, count), rows_of(in.v, first, count),
          rows_of(in.a, first, count), rows_of(in.b, first, count)};
}

std::string describe(const GatedDeltaShape& s) {
  return "Hk " + std::to_string(s.num_k_heads) + ", Hv " + std::to_string(s.num_v_heads) + ", Dk " +
         std::to_string(s.k_head_dim) + ", Dv " + std::to_string(s.v_head_dim);
}

// Central differences in double of `loss` in each element of `values` (perturbed in place) against the analytic
// float gradient: max |analytic − numeric| / max |numeric|. Only the analytic side's fp32 rounding remains (about
// 1e-7 here), so the checks hold it to 1e-5: scaling the largest element of any gradient by 1.001 fails them.
double finite_difference_error(std::vector<double>& values, const std::function<double()>& loss,
                               const Tensor& analytic) {
  EXPECT_EQ(size_t(analytic.numel()), values.size());
  constexpr double h = 1e-6;
  std::vector<double> numeric(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double saved = values[i];
    values[i] = saved + h;
    const double up = loss();
    values[i] = saved - h;
    const double down = loss();
    values[i] = saved;
    numeric[i] = (up - down) / (2 * h);
  }
  return relative_error(analytic, numeric);
}

double weighted_sum(const std::vector<double>& y, const Tensor& w) {
  double total = 0;
  for (size_t i = 0; i < y.size(); ++i) total += y[i] * w.data<float>()[i];
  return total;
}

// ---- Gated DeltaNet: forward ----

const std::vector<GatedDeltaShape> kShapes{
    {2, 2, 4, 4},  // Hk == Hv
    {1, 2, 3, 5},  // Hv = 2·Hk, Dk < Dv
    {2, 8, 5, 3},  // Hv = 4·Hk, Dk > Dv
    {3, 6, 7, 5},  // odd sizes
};

// Two documents in 9 rows: 0..3 and 4..8.
const DocumentStarts kPacked{1, 0, 0, 0, 1, 0, 0, 0, 0};

TEST(GatedDeltaRule, ForwardMatchesTheNaiveRecurrence) {
  for (const GatedDeltaShape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Problem p = random_problem(s, 9);
    p.in.a.data<float>()[3] = 25.0f;  // softplus past its threshold of 20: linear
    const Tensor out = gated_delta_rule_forward(p.in, p.params, s, kPacked);
    ASSERT_EQ(out.shape(), Shape({9, s.num_v_heads * s.v_head_dim}));
    EXPECT_LT(relative_error(out, naive_forward(values_of(p.in, p.params), s, kPacked)), 2e-6);
  }
}

// A packed row computes what its documents compute alone: the state does not cross the start.
TEST(GatedDeltaRule, PackedDocumentsEqualTheDocumentsAlone) {
  const GatedDeltaShape s{1, 2, 3, 5};
  const Problem p = random_problem(s, 9);
  const Tensor packed = gated_delta_rule_forward(p.in, p.params, s, kPacked);
  for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 4}, {4, 5}}) {
    const Tensor alone = gated_delta_rule_forward(rows_of(p.in, first, count), p.params, s, one_document(count));
    EXPECT_TRUE(alone.same_bytes(rows_of(packed, first, count))) << "document at " << first;
  }
}

// Generation's cache: rows [0, m) then [m, N) through `state` give the one pass's bits, and the state ends as the
// one pass's final state (which the naive recurrence's agrees with).
TEST(GatedDeltaRule, ContinuesFromItsState) {
  const GatedDeltaShape s{2, 4, 3, 5};
  const Problem p = random_problem(s, 8);
  const Tensor whole_state = Tensor::zeros({4, 3, 5}, DType::F32);
  const Tensor whole = gated_delta_rule_forward(p.in, p.params, s, one_document(8), whole_state);
  std::vector<double> naive_state;
  naive_forward(values_of(p.in, p.params), s, one_document(8), &naive_state);
  EXPECT_LT(relative_error(whole_state, naive_state), 2e-6);
  for (const int64_t m : {1, 3, 7}) {
    SCOPED_TRACE("split at " + std::to_string(m));
    const Tensor state = Tensor::zeros({4, 3, 5}, DType::F32);
    const Tensor head = gated_delta_rule_forward(rows_of(p.in, 0, m), p.params, s, one_document(m), state);
    const Tensor tail =
        gated_delta_rule_forward(rows_of(p.in, m, 8 - m), p.params, s, DocumentStarts(size_t(8 - m), 0), state);
    EXPECT_TRUE(head.same_bytes(rows_of(whole, 0, m)));
    EXPECT_TRUE(tail.same_bytes(rows_of(whole, m, 8 - m)));
    EXPECT_TRUE(state.same_bytes(whole_state));
  }
  // A row that starts a document ignores the state it is given.
  const Tensor stale = whole_state.clone();
  EXPECT_TRUE(gated_delta_rule_forward(p.in, p.params, s, one_document(8), stale).same_bytes(whole));
}

// transformers' prompt path, the chunked algorithm, computes the same function as the recurrence; with an initial
// state, chunks of 2, 3 and 64 over 11 rows (a short last chunk each time).
TEST(GatedDeltaRule, MatchesTransformersChunkedAlgorithm) {
  const GatedDeltaShape s{2, 4, 5, 3};
  const Problem p = random_problem(s, 11);
  const Values x = values_of(p.in, p.params);
  const Tensor initial = random({4, 5, 3}, 0.5f);
  const Tensor state = initial.clone();
  const Tensor out = gated_delta_rule_forward(p.in, p.params, s, DocumentStarts(11, 0), state);
  for (const int64_t chunk : {2, 3, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    std::vector<double> chunked_state = doubles(initial);
    EXPECT_LT(relative_error(out, chunked_forward(x, s, 11, chunk, &chunked_state)), 2e-6);
    EXPECT_LT(relative_error(state, chunked_state), 2e-6);
  }
}

// Packed documents inside the chunks: the chunked algorithm with a start's decay set to 0 (chunked_forward's
// products) gives the op's restarts, starts on chunk boundaries, right after them, in consecutive rows and on the
// last row; with and without a state carried in (row 0 continuing it).
TEST(GatedDeltaRule, ChunkedAlgorithmRestartsInsideChunks) {
  const GatedDeltaShape s{2, 4, 6, 5};
  const int64_t rows = 41;
  const Problem p = random_problem(s, rows);
  const Values x = values_of(p.in, p.params);
  DocumentStarts starts(size_t(rows), 0);
  for (const int64_t n : {5, 6, 8, 17, 24, 33, 40}) starts[size_t(n)] = 1;
  const Tensor initial = random({4, 6, 5}, 0.5f);
  for (const bool carried : {false, true}) {
    const Tensor state = carried ? initial.clone() : Tensor();
    DocumentStarts op_starts = starts;
    op_starts[0] = carried ? 0 : 1;
    const Tensor out = gated_delta_rule_forward(p.in, p.params, s, op_starts, state);
    for (const int64_t chunk : {4, 8, 64}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (carried ? ", state carried in" : ""));
      std::vector<double> chunked_state = carried ? doubles(initial) : std::vector<double>();
      EXPECT_LT(relative_error(out, chunked_forward(x, s, rows, chunk, &chunked_state, op_starts)), 2e-6);
      if (carried) {
        EXPECT_LT(relative_error(state, chunked_state), 2e-6);
      }
    }
  }
}

// The table tests/reference/make_gated_delta_table.py printed with transformers 5.17.0 (torch 2.11.0):
// torch_chunk_gated_delta_rule's output in fp32 after Qwen3NextGatedDeltaNet.forward's preprocessing, and torch
// autograd's gradients of sum(w ⊙ out) in the raw a, b columns, dt_bias and A_log.
const std::vector<double> kOut{6.63775504e-02,  2.19865330e-02,  -2.96820905e-02, -8.10599923e-02, -1.23316608e-01,
                               -1.67941779e-01, -2.27148905e-01, -2.16105834e-01, 1.19929269e-01,  3.30845565e-02,
                               -3.78819443e-02, -1.32834926e-01, 2.24692956e-01,  3.06979060e-01,  3.58082473e-01,
                               3.46536428e-01,  1.79343507e-01,  1.22911073e-01,  3.91171128e-02,  -3.65978144e-02};
const std::vector<double> kDa{-2.32966375e-08, -5.97567062e-09, 2.61150226e-02,  -2.21972577e-02, -2.23051105e-02,
                              3.42932194e-02,  3.20869610e-02,  -3.27379163e-03, -1.83675122e-02, 5.01427567e-03};
const std::vector<double> kDb{-7.40794372e-03, 5.96725643e-02, 2.01166987e-01, 1.60474658e-01, -4.74299528e-02,
                              -1.58597492e-02, 1.54503837e-01, 1.74222901e-01, 3.87718640e-02, 5.03081596e-03};
const std::vector<double> kDdtBias{1.75293367e-02, 1.38364406e-02};
const std::vector<double> kDaLog{1.78401768e-02, 2.41930243e-02};

// Element i of input t is float(sin(0.37 i + 1.3 t)), times `amplitude` (the script's formula).
Tensor formula(int t, Shape shape, float amplitude = 1.0f) {
  Tensor out = Tensor::empty(std::move(shape), DType::F32);
  for (int64_t i = 0; i < out.numel(); ++i)
    out.data<float>()[i] = amplitude * float(std::sin(0.37 * double(i) + 1.3 * t));
  return out;
}

TEST(GatedDeltaRule, MatchesTransformersTable) {
  const GatedDeltaShape s{1, 2, 3, 2};
  const GatedDeltaInputs in{formula(0, {5, 3}, 2.0f), formula(1, {5, 3}, 2.0f), formula(2, {5, 4}), formula(3, {5, 2}),
                            formula(4, {5, 2})};
  const GatedDeltaParams params{formula(5, {2}), formula(6, {2})};
  const Tensor w = formula(7, {5, 4});
  EXPECT_LT(relative_error(gated_delta_rule_forward(in, params, s, one_document(5)), kOut), 1e-5);
  const GatedDeltaParams dparams{Tensor::zeros({2}, DType::F32), Tensor::zeros({2}, DType::F32)};
  const GatedDeltaInputs grad = gated_delta_rule_backward(w, in, params, s, one_document(5), dparams);
  EXPECT_LT(relative_error(grad.a, kDa), 1e-5);
  EXPECT_LT(relative_error(grad.b, kDb), 1e-5);
  EXPECT_LT(relative_error(dparams.dt_bias, kDdtBias), 1e-5);
  EXPECT_LT(relative_error(dparams.a_log, kDaLog), 1e-5);
}

TEST(GatedDeltaRule, RefusesShapesThatDisagree) {
  const GatedDeltaShape s{1, 2, 3, 5};
  const Problem p = random_problem(s, 4);
  EXPECT_THROW(gated_delta_rule_forward(p.in, p.params, {2, 3, 3, 5}, one_document(4)), Error);  // 3 % 2
  EXPECT_THROW(gated_delta_rule_forward(p.in, p.params, {1, 2, 4, 5}, one_document(4)), Error);  // Dk
  EXPECT_THROW(gated_delta_rule_forward(p.in, p.params, s, one_document(3)), Error);             // flags
  EXPECT_THROW(gated_delta_rule_forward(p.in, p.params, s, one_document(4), Tensor::zeros({2, 5, 3}, DType::F32)),
               Error);
  Problem short_v = p;
  short_v.in.v = random({3, 10});
  EXPECT_THROW(gated_delta_rule_forward(short_v.in, p.params, s, one_document(4)), Error);
  EXPECT_THROW(gated_delta_rule_backward(random({4, 9}), p.in, p.params, s, one_document(4), {}), Error);
}

// ---- Gated DeltaNet: backward ----

// Every gradient against central differences of the double recurrence, with packed documents (7 rows: 0..2 and
// 3..6). dparams start at 0.5: the op accumulates into them.
void check_backward(const GatedDeltaShape& s, const DocumentStarts& starts = {1, 0, 0, 1, 0, 0, 0}) {
  SCOPED_TRACE(describe(s) + ", " + std::to_string(starts.size()) + " rows");
  const int64_t rows = int64_t(starts.size());
  const Problem p = random_problem(s, rows);
  const Tensor w = random({rows, s.num_v_heads * s.v_head_dim});
  const GatedDeltaParams dparams{Tensor::empty({s.num_v_heads}, DType::F32),
                                 Tensor::empty({s.num_v_heads}, DType::F32)};
  for (const Tensor& t : {dparams.dt_bias, dparams.a_log}) std::fill_n(t.data<float>(), t.numel(), 0.5f);
  const GatedDeltaInputs grad = gated_delta_rule_backward(w, p.in, p.params, s, starts, dparams);
  for (const Tensor& t : {dparams.dt_bias, dparams.a_log})
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] -= 0.5f;
  Values x = values_of(p.in, p.params);
  auto loss = [&] { return weighted_sum(naive_forward(x, s, starts), w); };
  const std::pair<std::vector<double>*, const Tensor*> checks[] = {
      {&x.q, &grad.q},           {&x.k, &grad.k}, {&x.v, &grad.v},
      {&x.a, &grad.a},           {&x.b, &grad.b}, {&x.dt_bias, &dparams.dt_bias},
      {&x.a_log, &dparams.a_log}};
  const char* names[] = {"dq", "dk", "dv", "da", "db", "d(dt_bias)", "d(A_log)"};
  for (size_t c = 0; c < std::size(checks); ++c) {
    const double error = finite_difference_error(*checks[c].first, loss, *checks[c].second);
    char text[32];
    std::snprintf(text, sizeof text, "%.2e", error);
    ::testing::Test::RecordProperty(std::string("max_error_") + names[c] + " (" + describe(s) + ")", text);
    EXPECT_LT(error, 1e-5) << names[c];
  }
  // Frozen parameters: undefined dparams are skipped, the inputs' gradients unchanged.
  const GatedDeltaInputs frozen = gated_delta_rule_backward(w, p.in, p.params, s, starts, {});
  EXPECT_TRUE(frozen.q.same_bytes(grad.q) && frozen.a.same_bytes(grad.a));
}

TEST(GatedDeltaRule, BackwardMatchesFiniteDifferences) {
  check_backward({1, 1, 3, 2});
  check_backward({1, 2, 3, 2});  // two value heads share the key head: its gradient sums theirs
  check_backward({2, 8, 4, 3});
}

// The backward pass recomputes its states a segment of 64 rows at a time from the ones it kept: past several
// segments, with documents starting inside one and at a segment's first row, its gradients are the whole
// recurrence's.
TEST(GatedDeltaRule, BackwardAcrossSegmentsMatchesFiniteDifferences) {
  DocumentStarts starts(150, 0);
  for (const size_t start : {0, 40, 64, 100}) starts[start] = 1;
  check_backward({1, 2, 2, 2}, starts);
}

// ---- Gated RMSNorm, the gate after the norm (Qwen3NextRMSNormGated) ----

// weight ⊙ rms_norm(x) ⊙ silu(z) per group, or weight ⊙ rms_norm(x ⊙ silu(z)), in double.
std::vector<double> naive_gated_norm(const std::vector<double>& x, const std::vector<double>& z,
                                     const std::vector<double>& weight, int64_t group, double eps,
                                     GatePlacement placement) {
  std::vector<double> out(x.size()), normed(static_cast<size_t>(group));
  auto silu = [](double u) { return u / (1 + std::exp(-u)); };
  for (size_t start = 0; start < x.size(); start += size_t(group)) {
    double squares = 0;
    for (size_t i = 0; i < size_t(group); ++i) {
      normed[i] = x[start + i] * (placement == GatePlacement::BeforeNorm ? silu(z[start + i]) : 1.0);
      squares += normed[i] * normed[i];
    }
    const double inv = 1 / std::sqrt(squares / double(group) + eps);
    for (size_t i = 0; i < size_t(group); ++i)
      out[start + i] = weight[(start + i) % weight.size()] * normed[i] * inv *
                       (placement == GatePlacement::AfterNorm ? silu(z[start + i]) : 1.0);
  }
  return out;
}

TEST(GatedRmsNorm, AfterNormMatchesTheFormula) {
  const Tensor x = random({5, 12}, 2.0f), z = random({5, 12}, 2.0f), weight = random({12});
  const Tensor out = gated_rms_norm_forward(x, z, weight, 4, 1e-6, GatePlacement::AfterNorm);
  EXPECT_LT(
      relative_error(out, naive_gated_norm(doubles(x), doubles(z), doubles(weight), 4, 1e-6, GatePlacement::AfterNorm)),
      1e-6);
  // The default placement stays Mamba2's, and the two placements differ.
  EXPECT_TRUE(gated_rms_norm_forward(x, z, weight, 4, 1e-6)
                  .same_bytes(gated_rms_norm_forward(x, z, weight, 4, 1e-6, GatePlacement::BeforeNorm)));
  EXPECT_GT(relative_error(gated_rms_norm_forward(x, z, weight, 4, 1e-6), doubles(out)), 1e-2);
}

TEST(GatedRmsNorm, BackwardMatchesFiniteDifferences) {
  for (const GatePlacement placement : {GatePlacement::BeforeNorm, GatePlacement::AfterNorm}) {
    SCOPED_TRACE(placement == GatePlacement::AfterNorm ? "after" : "before");
    const Tensor x = random({3, 10}), z = random({3, 10}, 2.0f), weight = random({10}), w = random({3, 10});
    const Tensor dweight = Tensor::zeros({10}, DType::F32);
    const GatedRmsNormGrads grads = gated_rms_norm_backward(w, x, z, weight, 5, 1e-6, dweight, placement);
    std::vector<double> xs = doubles(x), zs = doubles(z), ws = doubles(weight);
    auto loss = [&] { return weighted_sum(naive_gated_norm(xs, zs, ws, 5, 1e-6, placement), w); };
    EXPECT_LT(finite_difference_error(xs, loss, grads.dx), 1e-5) << "dx";
    EXPECT_LT(finite_difference_error(zs, loss, grads.dz), 1e-5) << "dz";
    EXPECT_LT(finite_difference_error(ws, loss, dweight), 1e-5) << "dweight";
  }
}

}  // namespace
}  // namespace moetune::ops
