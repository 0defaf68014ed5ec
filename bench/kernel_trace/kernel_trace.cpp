// A kernel timeline for a process that uses CUDA, without Nsight Systems (the GPU machine has none): CUPTI's
// activity API records every kernel, memcpy and memset with its GPU start and end, and every CUDA runtime and
// driver call with its host start and end (one clock for both), written as CSV for bench/kernel_trace/summary.py.
//
//   CUDA_INJECTION64_PATH=build/bench/libkernel_trace.so KERNEL_TRACE_OUT=/tmp/trace ./moetune finetune ...
//
// The driver loads this library at cuInit and calls InitializeInjection. One file per process:
// $KERNEL_TRACE_OUT.<pid>.csv with rows kind,start_ns,end_ns,stream,correlation,name (kind: kernel, memcpy,
// memset, runtime, driver). A kernel and the API call that launched it share the correlation id, so the summary
// can tell a GPU that waits for the host (launch just before the kernel starts) from one that has work queued.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unistd.h>

namespace {
constexpr size_t kBufferBytes = 8 << 20;
std::mutex file_mutex;
FILE* out = nullptr;

void report(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, text ? text : "?");
}

// CSV fields never hold commas or quotes of their own: kernel names can (templates), so they are quoted.
void write_row(const char* kind, uint64_t start, uint64_t end, uint32_t stream, uint32_t correlation, const char* name) {
  std::fprintf(out, "%s,%llu,%llu,%u,%u,\"", kind, static_cast<unsigned long long>(start),
               static_cast<unsigned long long>(end), stream, correlation);
  for (const char* c = name ? name : ""; *c; ++c) std::fputc(*c == '"' ? '\'' : *c, out);
  std::fputs("\"\n", out);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(file_mutex);
  CUpti_Activity* record = nullptr;
  while (out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        write_row("kernel", k->start, k->end, k->streamId, k->correlationId, k->name);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        const std::string name = "memcpy kind " + std::to_string(m->copyKind) + " bytes " + std::to_string(m->bytes);
        write_row("memcpy", m->start, m->end, m->streamId, m->correlationId, name.c_str());
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        const std::string name = "memset bytes " + std::to_string(m->bytes);
        write_row("memset", m->start, m->end, m->streamId, m->correlationId, name.c_str());
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        const bool runtime = record->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
        const char* name = nullptr;
        cuptiGetCallbackName(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, a->cbid, &name);
        write_row(runtime ? "runtime" : "driver", a->start, a->end, 0, a->correlationId, name);
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

void finish() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(file_mutex);
  if (out) std::fclose(out);
  out = nullptr;
}
}  // namespace

extern "C" int InitializeInjection() {
  const char* prefix = std::getenv("KERNEL_TRACE_OUT");
  const std::string path = std::string(prefix ? prefix : "kernel_trace") + "." + std::to_string(getpid()) + ".csv";
  out = std::fopen(path.c_str(), "w");
  if (!out) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path.c_str());
    return 0;
  }
  std::fputs("kind,start_ns,end_ns,stream,correlation,name\n", out);
  report(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
    report(cuptiActivityEnable(kind), "cuptiActivityEnable");
  std::atexit(finish);
  std::fprintf(stderr, "kernel_trace: writing %s\n", path.c_str());
  return 1;
}
