// Element types. The set is safetensors' whole list, so any checkpoint round-trips byte for byte; the
// engine computes in f32 (CPU) and bf16 (GPU) and converts between the float types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moetune {

enum class DType : uint8_t {
  F64, F32, BF16, F16, F8_E4M3, F8_E5M2,
  I64, I32, I16, I8, U64, U32, U16, U8, Bool,
};

size_t dtype_size(DType dtype);
bool is_floating(DType dtype);

// The safetensors spelling ("BF16", "F32", ...), which is also how the engine prints dtypes.
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);

// torch's spelling as config.json writes it ("bfloat16", "float32", "float16"); nullopt if unknown.
std::optional<DType> dtype_from_torch_name(std::string_view name);
std::string_view dtype_torch_name(DType dtype);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

}  // namespace moetune
