#include "moetune/core/dtype.h"

#include <array>

namespace moetune {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::string_view torch_name;
  size_t size;
  bool floating;
};

constexpr std::array<DTypeInfo, 15> kDTypes{{
    {DType::F64, "F64", "float64", 8, true},
    {DType::F32, "F32", "float32", 4, true},
    {DType::BF16, "BF16", "bfloat16", 2, true},
    {DType::F16, "F16", "float16", 2, true},
    {DType::F8_E4M3, "F8_E4M3", "float8_e4m3fn", 1, true},
    {DType::F8_E5M2, "F8_E5M2", "float8_e5m2", 1, true},
    {DType::I64, "I64", "int64", 8, false},
    {DType::I32, "I32", "int32", 4, false},
    {DType::I16, "I16", "int16", 2, false},
    {DType::I8, "I8", "int8", 1, false},
    {DType::U64, "U64", "uint64", 8, false},
    {DType::U32, "U32", "uint32", 4, false},
    {DType::U16, "U16", "uint16", 2, false},
    {DType::U8, "U8", "uint8", 1, false},
    {DType::Bool, "BOOL", "bool", 1, false},
}};

const DTypeInfo& info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }
bool is_floating(DType dtype) { return info(dtype).floating; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::string_view dtype_torch_name(DType dtype) { return info(dtype).torch_name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (entry.name == name) return entry.dtype;
  return std::nullopt;
}

std::optional<DType> dtype_from_torch_name(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  if (name == "float") return DType::F32;
  if (name == "half") return DType::F16;
  for (const auto& entry : kDTypes)
    if (entry.torch_name == name) return entry.dtype;
  return std::nullopt;
}

}  // namespace moetune
