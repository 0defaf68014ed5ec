// The Mamba2 mixer's GPU ops (conv + SiLU, the chunked SSD scan, the gated RMSNorm) against the CPU oracles of
// ops/mamba2.h on fp32 copies of the same bf16 inputs, and the whole GPU mixer against the CPU mixer on the
// transformers fixture's weights (plain, padded and packed batches). The operands are read and written as column
// blocks of wider tensors, as the mixer uses them; outputs start poisoned. Scan cases put document starts inside
// chunks, on chunk boundaries and in consecutive rows, lengths not multiples of the chunk, several groups.
// DISABLED_NanoWidths is the benchmark run.sh prints (seq 4096, batch 2 at Nemotron-3-Nano's widths).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "column_block_test.h"
#include "gpu_test_util.h"
#include "gpu_timing.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/io/safetensors.h"
#include "moetune/model/block_util.h"
#include "moetune/model/cuda/mamba2_mixer_gpu.h"
#include "moetune/model/mamba2_mixer.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/gated_rms_norm.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/mamba2_conv.h"
#include "moetune/ops/cuda/mamba2_scan.h"
#include "moetune/ops/mamba2.h"
#include "test_util.h"

namespace moetune {
namespace {

using ops::cuda::ColumnBlock;
using testing::cpu_block;
using testing::kBf16Tolerance;
using testing::mean_gpu_ms;
using testing::poisoned;
using testing::relative_error;
using testing::to_cpu_f32;

class Mamba2Gpu : public testing::ColumnBlockGpuTest {
 protected:
  // Document starts at row 0 and where `at` says, as CPU flags.
  static ops::DocumentStarts starts_at(int64_t rows, const std::vector<int64_t>& at) {
    ops::DocumentStarts starts(size_t(rows), 0);
    starts[0] = 1;
    for (int64_t n : at)
      if (n < rows) starts[size_t(n)] = 1;
    return starts;
  }
};

// Rows of padding set to 0 in a CPU f32 tensor.
void zero_rows(const Tensor& t, const std::vector<uint8_t>& valid) {
  for (size_t n = 0; n < valid.size(); ++n)
    if (!valid[n]) std::fill_n(t.data<float>() + int64_t(n) * t.size(1), t.size(1), 0.0f);
}

// ---------------------------------------------------------------------------------------------------------------
// Conv

TEST_F(Mamba2Gpu, ConvForwardAndBackwardMatchCpu) {
  SCOPED_TRACE(seed());
  struct Case {
    int64_t rows, channels, kernel;
    std::vector<int64_t> starts;
    std::vector<int64_t> padding;
    bool bias;
  };
  for (const Case& c : std::vector<Case>{{37, 24, 4, {5, 6, 20}, {}, true},
                                         {64, 70, 3, {32}, {0, 1, 40, 41, 63}, false},
                                         {9, 8, 1, {}, {}, true},
                                         {300, 160, 4, {100, 101, 102, 250}, {150, 151}, true}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.channels << " channels, kernel " << c.kernel);
    const ColumnBlock xbc = random_block(c.rows, c.channels, 5);
    const Tensor weight = random_gpu({c.channels, c.kernel}, 0.5f);
    const Tensor bias = c.bias ? random_gpu({c.channels}, 0.5f) : Tensor();
    std::vector<uint8_t> valid;
    if (!c.padding.empty()) {
      valid.assign(size_t(c.rows), 1);
      for (int64_t n : c.padding) valid[size_t(n)] = 0;
    }
    // Padding edges restart the window, as model::mamba2_rows makes them.
    ops::DocumentStarts starts = starts_at(c.rows, c.starts);
    for (size_t n = 1; n < valid.size(); ++n)
      if (valid[n] != valid[n - 1]) starts[n] = 1;
    const Tensor starts_gpu = ops::cuda::upload_row_flags(starts), valid_gpu = ops::cuda::upload_row_flags(valid);
    const Tensor w32 = to_cpu_f32(weight), b32 = c.bias ? to_cpu_f32(bias) : Tensor();

    const ColumnBlock out = poisoned_block(c.rows, c.channels, 2);
    ops::cuda::mamba2_conv_forward(xbc, weight, bias, starts_gpu, valid_gpu, out);
    Tensor expected = ops::mamba2_conv_forward(cpu_block(xbc), w32, b32, starts);
    zero_rows(expected, valid);
    EXPECT_LT(relative_error(cpu_block(out), expected), kBf16Tolerance);

    const ColumnBlock dout = random_block(c.rows, c.channels, 1);
    const Tensor dweight = random_gpu({c.channels, c.kernel}, 1.0f, DType::F32);
    const Tensor dbias = c.bias ? random_gpu({c.channels}, 1.0f, DType::F32) : Tensor();
    Tensor expected_dweight = to_cpu_f32(dweight), expected_dbias = c.bias ? to_cpu_f32(dbias) : Tensor();
    Tensor d32 = cpu_block(dout);
    zero_rows(d32, valid);
    const Tensor expected_dx =
        ops::mamba2_conv_backward(d32, cpu_block(xbc), w32, b32, starts, expected_dweight, expected_dbias);
    const ColumnBlock dx = poisoned_block(c.rows, c.channels, 7);
    ops::cuda::mamba2_conv_backward(dout, xbc, weight, bias, starts_gpu, valid_gpu, dx, dweight, dbias);
    EXPECT_LT(relative_error(cpu_block(dx), expected_dx), kBf16Tolerance);
    EXPECT_LT(relative_error(dweight, expected_dweight), kBf16Tolerance);
    if (c.bias) {
      EXPECT_LT(relative_error(dbias, expected_dbias), kBf16Tolerance);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Scan

struct ScanCase {
  int64_t rows, heads, head_dim, groups, state, chunk;
  std::vector<int64_t> starts;
  double dt_min;
};

class Mamba2ScanGpu : public Mamba2Gpu {
 protected:
  void check(const ScanCase& c) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.heads << "x" << c.head_dim << " heads, "
                                      << c.groups << " groups of " << c.state << ", chunk " << c.chunk);
    ops::Mamba2Scan scan{c.heads, c.head_dim, c.groups, c.state, c.dt_min, INFINITY};
    const int64_t inner = c.heads * c.head_dim, bc = c.groups * c.state;
    const ops::cuda::Mamba2ScanBlocks in{random_block(c.rows, inner, 3), random_block(c.rows, c.heads, 2),
                                         random_block(c.rows, bc, 1), random_block(c.rows, bc, 4)};
    // dt_bias near softplus⁻¹ of 0.01..0.1, A_log = log(1..H) (transformers' init), D near 1: trained ranges.
    std::vector<float> dt_bias(size_t(c.heads)), a_log(size_t(c.heads)), d(size_t(c.heads));
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (int64_t h = 0; h < c.heads; ++h) {
      const float dt = std::exp(std::log(0.01f) + unit(rng()) * (std::log(0.1f) - std::log(0.01f)));
      dt_bias[size_t(h)] = dt + std::log(-std::expm1(-dt));
      a_log[size_t(h)] = std::log(float(h + 1));
      d[size_t(h)] = 1.0f + 0.2f * (unit(rng()) - 0.5f);
    }
    auto upload = [](const std::vector<float>& v) {
      return ops::cast(Tensor::from_vector(v, {int64_t(v.size())}), DType::BF16).to(Device::cuda());
    };
    const ops::Mamba2ScanParams params{upload(dt_bias), upload(a_log), upload(d)};
    const ops::Mamba2ScanParams params32{to_cpu_f32(params.dt_bias), to_cpu_f32(params.a_log), to_cpu_f32(params.d)};
    const ops::DocumentStarts starts = starts_at(c.rows, c.starts);
    const Tensor starts_gpu = ops::cuda::upload_row_flags(starts);
    const ops::Mamba2ScanInputs in32{cpu_block(in.x), cpu_block(in.dt), cpu_block(in.b), cpu_block(in.c)};

    const ColumnBlock y = poisoned_block(c.rows, inner, 2);
    ops::cuda::mamba2_scan_forward(in, params, scan, c.chunk, starts_gpu, y);
    const Tensor expected_y = ops::mamba2_scan_forward(in32, params32, scan, starts);
    EXPECT_LT(relative_error(cpu_block(y), expected_y), kBf16Tolerance) << "y";

    const ColumnBlock dy = random_block(c.rows, inner, 1);
    const ops::Mamba2ScanParams dparams{random_gpu({c.heads}, 1.0f, DType::F32), random_gpu({c.heads}, 1.0f, DType::F32),
                                        random_gpu({c.heads}, 1.0f, DType::F32)};
    const ops::Mamba2ScanParams expected_dparams{to_cpu_f32(dparams.dt_bias), to_cpu_f32(dparams.a_log),
                                                 to_cpu_f32(dparams.d)};
    const ops::Mamba2ScanInputs expected =
        ops::mamba2_scan_backward(cpu_block(dy), in32, params32, scan, starts, expected_dparams);
    // The input gradients as the mixer lays them out: dx, dB, dC side by side, dt elsewhere.
    const Tensor dconv = poisoned({c.rows, inner + 2 * bc}, DType::BF16, Device::cuda());
    const ops::cuda::Mamba2ScanBlocks grads{{dconv, 0, inner}, poisoned_block(c.rows, c.heads, 5),
                                            {dconv, inner, bc}, {dconv, inner + bc, bc}};
    ops::cuda::mamba2_scan_backward(dy, in, params, scan, c.chunk, starts_gpu, grads, dparams);
    EXPECT_LT(relative_error(cpu_block(grads.x), expected.x), kBf16Tolerance) << "dx";
    EXPECT_LT(relative_error(cpu_block(grads.dt), expected.dt), kBf16Tolerance) << "ddt";
    EXPECT_LT(relative_error(cpu_block(grads.b), expected.b), kBf16Tolerance) << "dB";
    EXPECT_LT(relative_error(cpu_block(grads.c), expected.c), kBf16Tolerance) << "dC";
    EXPECT_LT(relative_error(dparams.dt_bias, expected_dparams.dt_bias), kBf16Tolerance) << "d dt_bias";
    EXPECT_LT(relative_error(dparams.a_log, expected_dparams.a_log), kBf16Tolerance) << "d A_log";
    EXPECT_LT(relative_error(dparams.d, expected_dparams.d), kBf16Tolerance) << "dD";
  }
};

TEST_F(Mamba2ScanGpu, SmallChunksWithDocumentsInsideAndAcross) {
  SCOPED_TRACE(seed());
  // Starts inside a chunk (5, 13), on a chunk boundary (16), in consecutive rows (21, 22), near the end.
  check({37, 4, 8, 2, 16, 8, {5, 13, 16, 21, 22, 35}, 0.0});
  // One document over many chunks, length not a multiple of the chunk, one group.
  check({61, 3, 4, 1, 8, 4, {}, 0.0});
  // Chunk longer than the sequence; the clamp cutting some dt (no gradient there).
  check({11, 4, 4, 4, 4, 16, {3}, 0.04});
  // A chunk of one row.
  check({9, 2, 4, 1, 4, 1, {4}, 0.0});
}

TEST_F(Mamba2ScanGpu, FullWidthHeadsAndState) {
  SCOPED_TRACE(seed());
  // Nemotron-3-Nano's head_dim, state and chunk (fewer heads): the shared-memory sizes the model needs.
  check({300, 4, 64, 2, 128, 128, {70, 128, 129, 257}, 0.001});
}

// ---------------------------------------------------------------------------------------------------------------
// Gated RMSNorm

TEST_F(Mamba2Gpu, GatedRmsNormMatchesCpu) {
  SCOPED_TRACE(seed());
  // shared_weight: one group's weight for every group (the Gated DeltaNet's, gate after the norm).
  struct Case {
    int64_t rows, width, group;
    ops::GatePlacement placement = ops::GatePlacement::BeforeNorm;
    bool shared_weight = false;
  };
  constexpr auto kAfter = ops::GatePlacement::AfterNorm;
  for (const Case& c : std::vector<Case>{{13, 32, 8},
                                         {40, 1024, 512},
                                         {7, 96, 96},
                                         {5, 30, 3},
                                         {13, 32, 8, kAfter},
                                         {11, 256, 64, kAfter, true},
                                         {300, 48, 16, kAfter, true}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, width " << c.width << ", group " << c.group << ", gate "
                                      << (c.placement == kAfter ? "after" : "before") << " the norm"
                                      << (c.shared_weight ? ", one group's weight" : ""));
    const double eps = 1e-5;
    const int64_t weight_size = c.shared_weight ? c.group : c.width;
    const ColumnBlock x = random_block(c.rows, c.width, 0), z = random_block(c.rows, c.width, 9);
    Tensor weight_host = testing::random_normal({weight_size}, DType::F32, Device::cpu(), rng(), 0.2f);
    for (int64_t i = 0; i < weight_size; ++i) weight_host.data<float>()[i] += 1.0f;
    const Tensor weight = ops::cast(weight_host, DType::BF16).to(Device::cuda());
    const Tensor w32 = to_cpu_f32(weight);
    // The CPU op takes a [width] weight: one group's repeated.
    Tensor w32_full = Tensor::empty({c.width}, DType::F32);
    for (int64_t i = 0; i < c.width; ++i) w32_full.data<float>()[i] = w32.data<float>()[i % weight_size];
    const ColumnBlock y = poisoned_block(c.rows, c.width, 1);
    ops::cuda::gated_rms_norm_forward(x, z, weight, c.group, eps, y, c.placement);
    EXPECT_LT(relative_error(cpu_block(y), ops::gated_rms_norm_forward(cpu_block(x), cpu_block(z), w32_full, c.group,
                                                                       eps, c.placement)),
              kBf16Tolerance);

    const ColumnBlock dy = random_block(c.rows, c.width, 2);
    const Tensor dweight = random_gpu({weight_size}, 1.0f, DType::F32);
    const Tensor dweight_before = to_cpu_f32(dweight);
    Tensor dweight_full = Tensor::zeros({c.width}, DType::F32);
    const ops::GatedRmsNormGrads expected = ops::gated_rms_norm_backward(
        cpu_block(dy), cpu_block(x), cpu_block(z), w32_full, c.group, eps, dweight_full, c.placement);
    Tensor expected_dweight = dweight_before.clone();
    for (int64_t i = 0; i < c.width; ++i)
      expected_dweight.data<float>()[i % weight_size] += dweight_full.data<float>()[i];
    const ColumnBlock dx = poisoned_block(c.rows, c.width, 0), dz = poisoned_block(c.rows, c.width, 4);
    ops::cuda::gated_rms_norm_backward(dy, x, z, weight, c.group, eps, dx, dz, dweight, c.placement);
    EXPECT_LT(relative_error(cpu_block(dx), expected.dx), kBf16Tolerance) << "dx";
    EXPECT_LT(relative_error(cpu_block(dz), expected.dz), kBf16Tolerance) << "dz";
    EXPECT_LT(relative_error(dweight, expected_dweight), kBf16Tolerance) << "dweight";
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The whole mixer against the CPU mixer, on the transformers fixture's weights (tests/model/test_mamba2_mixer.cpp)

constexpr int64_t kFixtureBatch = 2, kFixtureSeq = 7;
const char* const kMixerNames[] = {"in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D",
                                   "norm.weight",    "out_proj.weight"};

std::vector<Tensor*> mixer_slots(model::Mamba2Weights& w) {
  return {&w.in_proj, &w.conv, &w.conv_bias, &w.dt_bias, &w.a_log, &w.d, &w.norm, &w.out_proj};
}

// The GPU mixer rounds four intermediates to bf16 in series (in_proj's output, the conv's, the scan's, the norm's),
// the CPU mixer none: a whole-mixer tolerance of a few bf16 roundings. The per-head parameters' and the conv
// bias's gradients are sums over every token of terms of both signs, whose relative error the cancellation
// multiplies (the padded case, with fewer tokens, shows it most).
constexpr double kMixerTolerance = 3e-2;
constexpr double kMixerSummedTolerance = 6e-2;

class Mamba2MixerGpu : public Mamba2Gpu {
 protected:
  void check_case(const std::string& name, int64_t chunk_size) {
    SCOPED_TRACE(::testing::Message() << name << ", chunk " << chunk_size);
    const io::SafetensorsFile file =
        io::SafetensorsFile::open(testing::fixture("nemotron_h_mamba2") / "mamba2.safetensors");
    model::Mamba2Spec spec;
    spec.num_heads = 4, spec.head_dim = 4, spec.num_groups = 2, spec.state_size = 8, spec.conv_kernel = 4;
    spec.conv_bias = true, spec.proj_bias = false, spec.dt_min = 0.1, spec.norm_eps = 1e-5;
    // GPU weights in bf16; the CPU mixer gets the same bf16 values in fp32.
    model::Mamba2Weights gpu, cpu, gpu_grads, cpu_grads;
    std::vector<Tensor*> g = mixer_slots(gpu), c = mixer_slots(cpu), gg = mixer_slots(gpu_grads),
                         cg = mixer_slots(cpu_grads);
    for (size_t i = 0; i < g.size(); ++i) {
      const Tensor hf = file.tensor(kMixerNames[i]);
      const Tensor host = hf.clone().view({hf.size(0), hf.numel() / hf.size(0)});
      const Tensor shaped = std::string(kMixerNames[i]) == "conv1d.weight" ? host : hf.clone();
      *g[i] = ops::cast(shaped, DType::BF16).to(Device::cuda());
      *c[i] = to_cpu_f32(*g[i]);
      *gg[i] = Tensor::zeros(shaped.shape(), DType::F32, Device::cuda());
      *cg[i] = Tensor::zeros(shaped.shape(), DType::F32);
    }
    const Tensor ids = Tensor::zeros({kFixtureBatch, kFixtureSeq}, DType::I64);
    const Tensor positions = file.contains(name + ".position_ids") ? file.tensor(name + ".position_ids") : Tensor();
    const Tensor mask = file.contains(name + ".attention_mask") ? file.tensor(name + ".attention_mask") : Tensor();
    const model::Mamba2Rows rows = model::mamba2_rows(model::sequence_layout(ids, positions, mask));
    const int64_t tokens = kFixtureBatch * kFixtureSeq;
    auto flat = [&](const Tensor& t) { return ops::cast(t.clone().view({tokens, -1}), DType::BF16).to(Device::cuda()); };
    const Tensor x = flat(file.tensor(name + ".x")), dy = flat(file.tensor(name + ".g"));

    model::Mamba2Stash cpu_stash;
    const Tensor expected = model::mamba2_mixer_forward(spec, cpu, to_cpu_f32(x), rows, &cpu_stash);
    const Tensor expected_dx = model::mamba2_mixer_backward(spec, cpu, to_cpu_f32(dy), cpu_stash, rows, cpu_grads);

    const model::cuda::Mamba2GpuRows gpu_rows = model::cuda::upload_mamba2_rows(rows);
    model::cuda::Mamba2GpuStash stash;
    const Tensor out = model::cuda::mamba2_mixer_forward_gpu(spec, chunk_size, gpu, x, gpu_rows, &stash);
    EXPECT_LT(relative_error(out, expected), kMixerTolerance) << "out";
    const Tensor dx = model::cuda::mamba2_mixer_backward_gpu(spec, chunk_size, gpu, dy, stash, gpu_rows, gpu_grads);
    EXPECT_LT(relative_error(dx, expected_dx), kMixerTolerance) << "dx";
    for (size_t i = 0; i < gg.size(); ++i) {
      const bool summed = gg[i]->dim() == 1 && std::string(kMixerNames[i]) != "norm.weight";
      EXPECT_LT(relative_error(*gg[i], *cg[i]), summed ? kMixerSummedTolerance : kMixerTolerance)
          << "d " << kMixerNames[i];
    }
  }
};

TEST_F(Mamba2MixerGpu, MatchesCpuMixerOnFixture) {
  for (const char* name : {"plain", "padded", "packed"})
    for (int64_t chunk : {4, 3, 16}) check_case(name, chunk);
}

// ---------------------------------------------------------------------------------------------------------------
// Benchmark: one Mamba2 layer at Nemotron-3-Nano's widths, batch 2 × 4096 tokens (not a test: run.sh runs it).

TEST_F(Mamba2Gpu, DISABLED_NanoWidths) {
  model::Mamba2Spec spec;
  spec.num_heads = 64, spec.head_dim = 64, spec.num_groups = 8, spec.state_size = 128, spec.conv_kernel = 4;
  spec.dt_min = 0.001;
  const int64_t hidden = 2688, tokens = 2 * 4096, chunk = 128;
  model::Mamba2Weights w, grads;
  w.in_proj = random_gpu({spec.projection(), hidden}, 0.02f);
  w.conv = random_gpu({spec.conv_channels(), spec.conv_kernel}, 0.3f);
  w.conv_bias = random_gpu({spec.conv_channels()}, 0.1f);
  std::vector<float> a_log(size_t(spec.num_heads)), dt_bias(size_t(spec.num_heads), -4.0f), d(size_t(spec.num_heads), 1.0f);
  for (int64_t h = 0; h < spec.num_heads; ++h) a_log[size_t(h)] = std::log(float(h + 1));
  auto upload = [](const std::vector<float>& v) {
    return ops::cast(Tensor::from_vector(v, {int64_t(v.size())}), DType::BF16).to(Device::cuda());
  };
  w.a_log = upload(a_log), w.dt_bias = upload(dt_bias), w.d = upload(d);
  w.norm = upload(std::vector<float>(size_t(spec.inner()), 1.0f));
  w.out_proj = random_gpu({hidden, spec.inner()}, 0.02f);
  for (auto [param, grad] : std::vector<std::pair<Tensor*, Tensor*>>{
           {&w.in_proj, &grads.in_proj}, {&w.conv, &grads.conv}, {&w.conv_bias, &grads.conv_bias},
           {&w.dt_bias, &grads.dt_bias}, {&w.a_log, &grads.a_log}, {&w.d, &grads.d}, {&w.norm, &grads.norm},
           {&w.out_proj, &grads.out_proj}})
    *grad = Tensor::zeros(param->shape(), DType::F32, Device::cuda());
  model::Mamba2Rows rows{starts_at(tokens, {4096}), {}};
  const model::cuda::Mamba2GpuRows gpu_rows = model::cuda::upload_mamba2_rows(rows);
  const Tensor x = random_gpu({tokens, hidden}), dy = random_gpu({tokens, hidden}, 0.1f);

  model::cuda::Mamba2GpuStash stash;
  const double mixer_fwd =
      mean_gpu_ms([&] { model::cuda::mamba2_mixer_forward_gpu(spec, chunk, w, x, gpu_rows, &stash); });
  const double mixer_bwd =
      mean_gpu_ms([&] { model::cuda::mamba2_mixer_backward_gpu(spec, chunk, w, dy, stash, gpu_rows, grads); });

  const Tensor projected = stash.projected, conv = stash.conv, scan_out = stash.scan;
  const ops::cuda::Mamba2ScanBlocks in{{conv, 0, spec.inner()},
                                       {projected, spec.inner() + spec.conv_channels(), spec.num_heads},
                                       {conv, spec.inner(), spec.num_groups * spec.state_size},
                                       {conv, spec.inner() + spec.num_groups * spec.state_size,
                                        spec.num_groups * spec.state_size}};
  const ops::Mamba2ScanParams params{w.dt_bias, w.a_log, w.d}, dparams{grads.dt_bias, grads.a_log, grads.d};
  const Tensor y = Tensor::empty(scan_out.shape(), DType::BF16, Device::cuda());
  const Tensor dscan = random_gpu(scan_out.shape(), 0.1f);
  const Tensor dconv = Tensor::empty(conv.shape(), DType::BF16, Device::cuda());
  const Tensor dprojected = Tensor::empty(projected.shape(), DType::BF16, Device::cuda());
  const ops::cuda::Mamba2ScanBlocks dscan_in{{dconv, 0, spec.inner()},
                                             {dprojected, spec.inner() + spec.conv_channels(), spec.num_heads},
                                             {dconv, spec.inner(), spec.num_groups * spec.state_size},
                                             {dconv, spec.inner() + spec.num_groups * spec.state_size,
                                              spec.num_groups * spec.state_size}};
  const double scan_fwd =
      mean_gpu_ms([&] { ops::cuda::mamba2_scan_forward(in, params, spec.scan(), chunk, gpu_rows.starts, y); });
  const double scan_bwd = mean_gpu_ms([&] {
    ops::cuda::mamba2_scan_backward(dscan, in, params, spec.scan(), chunk, gpu_rows.starts, dscan_in, dparams);
  });
  const ColumnBlock xbc{projected, spec.inner(), spec.conv_channels()};
  const double conv_fwd =
      mean_gpu_ms([&] { ops::cuda::mamba2_conv_forward(xbc, w.conv, w.conv_bias, gpu_rows.starts, {}, dconv); });
  const double conv_bwd = mean_gpu_ms([&] {
    ops::cuda::mamba2_conv_backward(conv, xbc, w.conv, w.conv_bias, gpu_rows.starts, {},
                                    ColumnBlock{dprojected, spec.inner(), spec.conv_channels()}, grads.conv,
                                    grads.conv_bias);
  });
  const Tensor normed = Tensor::empty(scan_out.shape(), DType::BF16, Device::cuda());
  const ColumnBlock z{projected, 0, spec.inner()};
  const double norm_fwd = mean_gpu_ms(
      [&] { ops::cuda::gated_rms_norm_forward(scan_out, z, w.norm, spec.inner() / spec.num_groups, 1e-5, normed); });
  const double norm_bwd = mean_gpu_ms([&] {
    ops::cuda::gated_rms_norm_backward(dscan, scan_out, z, w.norm, spec.inner() / spec.num_groups, 1e-5, y,
                                       ColumnBlock{dprojected, 0, spec.inner()}, grads.norm);
  });
  const Tensor out = Tensor::empty({tokens, hidden}, DType::BF16, Device::cuda());
  const double gemm_fwd = mean_gpu_ms([&] {
    ops::cuda::linear_forward(stash.input, w.in_proj, {}, projected);
    ops::cuda::linear_forward(normed, w.out_proj, {}, out);
  });
  const Tensor dx = Tensor::empty({tokens, hidden}, DType::BF16, Device::cuda());
  const double gemm_bwd = mean_gpu_ms([&] {
    ops::cuda::linear_backward(dy, normed, w.out_proj, y, grads.out_proj);
    ops::cuda::linear_backward(dprojected, stash.input, w.in_proj, dx, grads.in_proj);
  });
  gpu::synchronize();
  const double gemm_flops = 2.0 * double(tokens) * double(hidden) * double(spec.projection() + spec.inner());
  std::printf("MAMBA2_BENCH tokens %lld (batch 2 x 4096) hidden %lld heads %lld x %lld groups %lld state %lld chunk %lld\n",
              (long long)tokens, (long long)hidden, (long long)spec.num_heads, (long long)spec.head_dim,
              (long long)spec.num_groups, (long long)spec.state_size, (long long)chunk);
  std::printf("MAMBA2_BENCH scan        fwd %8.3f ms  bwd %8.3f ms\n", scan_fwd, scan_bwd);
  std::printf("MAMBA2_BENCH conv        fwd %8.3f ms  bwd %8.3f ms\n", conv_fwd, conv_bwd);
  std::printf("MAMBA2_BENCH gated_norm  fwd %8.3f ms  bwd %8.3f ms\n", norm_fwd, norm_bwd);
  std::printf("MAMBA2_BENCH in+out GEMM fwd %8.3f ms  bwd %8.3f ms  (fwd %.0f TFLOP/s)\n", gemm_fwd, gemm_bwd,
              gemm_flops / (gemm_fwd * 1e-3) / 1e12);
  std::printf("MAMBA2_BENCH mixer       fwd %8.3f ms  bwd %8.3f ms  (%.0f tokens/s fwd+bwd)\n", mixer_fwd, mixer_bwd,
              double(tokens) / ((mixer_fwd + mixer_bwd) * 1e-3));
  std::printf("MAMBA2_BENCH peak GPU memory %.2f GiB\n", double(gpu::memory_stats().peak_in_use) / (1 << 30));
}

}  // namespace
}  // namespace moetune
