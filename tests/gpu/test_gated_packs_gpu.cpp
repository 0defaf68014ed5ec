// SwiGLU's kernel shapes on the 16-byte path (ops/cuda/activation_kernel_choice.h): the several-packs kernels
// staged through shared memory, in tile order and reversed, give the one-pack kernel's bits (forward; backward
// with the recomputed activation apart, in dout's place and absent; clamped SwiGLU too)
// at Moonlight's widths and ragged ones. Not a check: DISABLED_TimesMoonlightShapes times every shape at the
// Moonlight benchmark's three SwiGLU shapes beside a device-to-device copy of the same bytes.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "gpu_tiled_random.h"
#include "gpu_timing.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/activation_kernel_choice.h"

namespace moetune {
namespace {

using ops::cuda::GatedKernel;
using testing::poisoned;

const Device kGpu = Device::cuda();
constexpr GatedKernel kOnePack{0, false};
// Every several-packs shape the launchers take, in tile order and reversed.
const std::vector<GatedKernel> kCandidates = {{1, false}, {2, false}, {4, false}, {1, true}, {2, true}, {4, true}};
// What the timing compares: the one-pack kernel and every several-packs shape.
std::vector<GatedKernel> timed() {
  std::vector<GatedKernel> kernels{kOnePack};
  kernels.insert(kernels.end(), kCandidates.begin(), kCandidates.end());
  return kernels;
}

std::string name_of(GatedKernel kernel) {
  if (kernel.packs == 0) return "one pack a thread (before)";
  return std::to_string(kernel.packs) + (kernel.packs == 1 ? " pack" : " packs") +
         ", staged" +
         (kernel.reversed ? ", reversed" : "");
}

std::vector<char> bytes_of(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const auto* p = static_cast<const char*>(host.raw_data());
  return {p, p + host.nbytes()};
}

// SwiGLU, or GPT-OSS's clamped SwiGLU at its alpha 1.702 and limit 7.
struct Activation {
  bool clamped = false;
  float alpha = 1.702f, limit = 7.0f;
};

class GatedPacksGpu : public testing::GpuTest {
 protected:
  Tensor forward(GatedKernel kernel, Activation a, const Tensor& gate_up) {
    const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
    const Tensor out = poisoned({rows, inner}, DType::BF16, kGpu);
    gpu::check(ops::cuda::launch_gated_forward_with(kernel, a.clamped, a.alpha, a.limit, gate_up.raw_data(),
                                                    out.raw_data(), rows, inner, gpu::stream()),
               "gated forward");
    return out;
  }

  // dgate_up's bytes, then recomputed's. recomputed: 0 none, 1 apart, 2 in dout's place.
  std::vector<char> backward(GatedKernel kernel, Activation a, const Tensor& dout, const Tensor& gate_up,
                             int recomputed_mode) {
    const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
    const Tensor dout_copy = dout.clone();
    const Tensor dgate_up = poisoned(gate_up.shape(), DType::BF16, kGpu);
    Tensor recomputed;
    if (recomputed_mode == 1) recomputed = poisoned({rows, inner}, DType::BF16, kGpu);
    if (recomputed_mode == 2) recomputed = dout_copy;
    gpu::check(ops::cuda::launch_gated_backward_with(kernel, a.clamped, a.alpha, a.limit, dout_copy.raw_data(),
                                                     gate_up.raw_data(), dgate_up.raw_data(),
                                                     recomputed.defined() ? recomputed.raw_data() : nullptr, rows,
                                                     inner, gpu::stream()),
               "gated backward");
    std::vector<char> out = bytes_of(dgate_up);
    if (recomputed.defined()) {
      const std::vector<char> r = bytes_of(recomputed);
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }

  void expect_same_bits(const std::vector<GatedKernel>& kernels, Activation a, int64_t rows, int64_t inner,
                        const std::vector<int>& recomputed_modes) {
    SCOPED_TRACE(::testing::Message() << "[" << rows << ", 2 x " << inner << "], clamped " << a.clamped);
    // Values of scale 3 reach the clamp (7) and sigmoid's flat ends.
    const Tensor gate_up = testing::tiled_random(rows, 2 * inner, rng(), 3.0f);
    const Tensor dout = testing::tiled_random(rows, inner, rng(), 1.0f);
    const std::vector<char> expected_out = bytes_of(forward(kOnePack, a, gate_up));
    std::vector<std::vector<char>> expected_grad;
    for (const int mode : recomputed_modes) expected_grad.push_back(backward(kOnePack, a, dout, gate_up, mode));
    for (const GatedKernel kernel : kernels) {
      SCOPED_TRACE(name_of(kernel));
      EXPECT_TRUE(bytes_of(forward(kernel, a, gate_up)) == expected_out) << "forward";
      for (size_t m = 0; m < recomputed_modes.size(); ++m)
        EXPECT_TRUE(backward(kernel, a, dout, gate_up, recomputed_modes[m]) == expected_grad[m])
            << "backward, recomputed mode " << recomputed_modes[m];
    }
  }
};

// Moonlight's three SwiGLU widths (routed experts 1408, shared experts 2816, dense layer 11264) at a sixteenth to
// an eighth of their rows, every candidate, every recomputed mode; ragged ones (one pack a row, a row of 2056,
// rows that end in a partial tile); GPT-OSS's clamped SwiGLU on three of them.
TEST_F(GatedPacksGpu, EveryShapeGivesTheOnePackKernelsBits) {
  SCOPED_TRACE(seed());
  struct Case { int64_t rows, inner; bool clamped; };
  for (const Case c : {Case{6144, 1408, false}, Case{1024, 2816, false}, Case{512, 11264, false}, Case{37, 8, false},
                       Case{1001, 2056, false}, Case{3, 1408, false}, Case{1, 8, false}, Case{1536, 1408, true},
                       Case{1001, 2056, true}, Case{37, 8, true}})
    expect_same_bits(kCandidates, Activation{c.clamped}, c.rows, c.inner, {0, 1, 2});
}

// The default at Moonlight's whole shapes, as the step runs it (recomputed in dout's place).
TEST_F(GatedPacksGpu, DefaultGivesTheOnePackKernelsBitsAtMoonlightShapes) {
  SCOPED_TRACE(seed());
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{49152, 1408}, {8192, 11264}, {8192, 2816}};
  for (const auto& [rows, inner] : shapes)
    expect_same_bits({ops::cuda::kDefaultGatedKernel}, Activation{}, rows, inner, {2});
}

TEST_F(GatedPacksGpu, UnknownPackCountsAreRefused) {
  const Tensor gate_up = testing::random_normal({4, 2 * 64}, DType::BF16, kGpu, rng());
  const Tensor out = poisoned({4, 64}, DType::BF16, kGpu);
  for (const int packs : {3, 8, -1})
    EXPECT_EQ(ops::cuda::launch_gated_forward_with(GatedKernel{packs, false}, false, 0, 0, gate_up.raw_data(),
                                                   out.raw_data(), 4, 64, gpu::stream()),
              cudaErrorInvalidValue);
}

// Microseconds a launch, back to back and after its input's producer, and the bandwidth each makes of `bytes`
// (what the kernel must move at least).
void report(const std::string& what, double ms, double after_producer_ms, double bytes) {
  std::printf("  %-44s %7.1f us %5.2f TB/s | after producer %7.1f us %5.2f TB/s (%.0f MB)\n", what.c_str(), ms * 1e3,
              bytes / (ms * 1e-3) / 1e12, after_producer_ms * 1e3, bytes / (after_producer_ms * 1e-3) / 1e12,
              bytes / 1e6);
}

// Mean milliseconds of `kernel` alone when `producer` runs before each launch (untimed, events around the kernel):
// as in the step, where a GEMM has just written the kernel's input and left its last tiles in L2.
double mean_ms_after(const std::function<void()>& producer, const std::function<void()>& kernel, int runs) {
  std::vector<cudaEvent_t> events(size_t(2 * runs));
  for (cudaEvent_t& e : events) gpu::check(cudaEventCreate(&e), "cudaEventCreate");
  producer();
  kernel();  // warm-up
  for (int r = 0; r < runs; ++r) {
    producer();
    gpu::check(cudaEventRecord(events[size_t(2 * r)], gpu::stream()), "cudaEventRecord");
    kernel();
    gpu::check(cudaEventRecord(events[size_t(2 * r + 1)], gpu::stream()), "cudaEventRecord");
  }
  gpu::synchronize();
  double total = 0;
  for (int r = 0; r < runs; ++r) {
    float ms = 0;
    gpu::check(cudaEventElapsedTime(&ms, events[size_t(2 * r)], events[size_t(2 * r + 1)]), "cudaEventElapsedTime");
    total += ms;
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  return total / runs;
}

TEST_F(GatedPacksGpu, DISABLED_TimesMoonlightShapes) {
  constexpr int kRuns = 40, kRunsAfterProducer = 20;
  struct Case { const char* name; int64_t rows, inner; };
  for (const Case c : {Case{"routed experts", 49152, 1408}, Case{"dense layer", 8192, 11264},
                       Case{"shared experts", 8192, 2816}}) {
    const Tensor gate_up = testing::tiled_random(c.rows, 2 * c.inner, rng(), 2.0f);
    const Tensor dout = testing::tiled_random(c.rows, c.inner, rng(), 1.0f);
    const Tensor gate_up_source = gate_up.clone(), dout_source = dout.clone();
    const Tensor out = Tensor::empty({c.rows, c.inner}, DType::BF16, kGpu);
    const Tensor dgate_up = Tensor::empty(gate_up.shape(), DType::BF16, kGpu);
    const int64_t half = c.rows * c.inner * 2;  // bytes of [rows, inner] bf16
    // Forward: reads gate_up, writes out. Backward (as the step runs it, recomputed over dout): reads gate_up and
    // dout, writes dgate_up and recomputed.
    const double forward_bytes = 3.0 * double(half), backward_bytes = 6.0 * double(half);
    const Tensor copy_from = Tensor::empty({3 * half / 2}, DType::BF16, kGpu);
    const Tensor copy_to = Tensor::empty({3 * half / 2}, DType::BF16, kGpu);
    std::printf("SwiGLU, %s: gate_up [%lld, %lld] bf16\n", c.name, static_cast<long long>(c.rows),
                static_cast<long long>(2 * c.inner));
    const auto copy_of = [&](double bytes) {  // a copy of bytes/2: bytes moved in all
      return [&, bytes] {
        gpu::check(cudaMemcpyAsync(copy_to.raw_data(), copy_from.raw_data(), size_t(bytes / 2),
                                   cudaMemcpyDeviceToDevice, gpu::stream()),
                   "copy");
      };
    };
    // The producers: the gate_up GEMM (forward), the d(activated) GEMM (backward), as copies of their outputs.
    const auto write_gate_up = [&] {
      gpu::check(cudaMemcpyAsync(gate_up.raw_data(), gate_up_source.raw_data(), size_t(gate_up.nbytes()),
                                 cudaMemcpyDeviceToDevice, gpu::stream()),
                 "producer");
    };
    const auto write_dout = [&] {
      gpu::check(cudaMemcpyAsync(dout.raw_data(), dout_source.raw_data(), size_t(dout.nbytes()),
                                 cudaMemcpyDeviceToDevice, gpu::stream()),
                 "producer");
    };
    const auto forward_copy = copy_of(forward_bytes), backward_copy = copy_of(backward_bytes);
    report("forward bytes as a device-to-device copy", testing::mean_gpu_ms(forward_copy, 3, kRuns),
           mean_ms_after(write_gate_up, forward_copy, kRunsAfterProducer), forward_bytes);
    for (const GatedKernel kernel : timed()) {
      const auto run = [&] {
        gpu::check(ops::cuda::launch_gated_forward_with(kernel, false, 0, 0, gate_up.raw_data(), out.raw_data(),
                                                        c.rows, c.inner, gpu::stream()),
                   "forward");
      };
      report("forward, " + name_of(kernel), testing::mean_gpu_ms(run, 3, kRuns),
             mean_ms_after(write_gate_up, run, kRunsAfterProducer), forward_bytes);
    }
    report("backward bytes as a device-to-device copy", testing::mean_gpu_ms(backward_copy, 3, kRuns),
           mean_ms_after(write_dout, backward_copy, kRunsAfterProducer), backward_bytes);
    for (const GatedKernel kernel : timed()) {
      const auto run = [&] {
        gpu::check(ops::cuda::launch_gated_backward_with(kernel, false, 0, 0, dout.raw_data(), gate_up.raw_data(),
                                                         dgate_up.raw_data(), dout.raw_data(), c.rows, c.inner,
                                                         gpu::stream()),
                   "backward");
      };
      report("backward, " + name_of(kernel), testing::mean_gpu_ms(run, 3, kRuns),
             mean_ms_after(write_dout, run, kRunsAfterProducer), backward_bytes);
    }
  }
}

}  // namespace
}  // namespace moetune
