#include "moetune/model/expert_parallel_save.h"

#include <map>

#include "moetune/model/model_description.h"

namespace moetune::model {

void save_expert_shard(const ModelWeights& weights, const std::filesystem::path& folder, bool with_dense) {
  std::filesystem::create_directories(folder);
  io::NamedTensors tensors;
  for (auto& named : to_hf_tensors(weights, with_dense ? TensorSelection::All : TensorSelection::ExpertsOnly))
    tensors.push_back(std::move(named));
  io::save_safetensors(folder / io::shard_file_name(size_t(weights.experts.index), size_t(weights.experts.count)), tensors);
}

void save_expert_sharded_index(const ModelWeights& weights, const std::filesystem::path& folder) {
  const ExpertShard experts = weights.experts;
  ParameterLayout whole = parameter_layout(weights.spec());
  std::map<std::string, std::string> weight_map;
  size_t total_bytes = 0, total_parameters = 0;
  for (int shard = 0; shard < experts.count; ++shard) {
    ParameterLayout layout = whole;
    shard_experts(layout, {shard, experts.count});
    const std::string file = io::shard_file_name(size_t(shard), size_t(experts.count));
    for (size_t i = 0; i < layout.parameters.size(); ++i) {
      const ParameterSpec& p = layout.parameters[i];
      if (p.placement != Placement::ExpertSharded && shard != 0) continue;  // dense tensors live in shard 0
      const auto add = [&](const std::string& name, const Shape& shape) {
        weight_map[name] = file;
        total_parameters += size_t(shape_numel(shape));
        total_bytes += size_t(shape_numel(shape)) * dtype_size(weights.disk_dtypes[i]);
      };
      if (weights.stored_fused[i]) {
        add(p.fused_hf_name, p.shape);
        continue;
      }
      for (const HfTensor& piece : p.pieces) add(piece.name, piece.shape);
    }
  }
  io::write_safetensors_index(folder, weight_map, total_bytes, total_parameters);
  save_model_files(weights, folder);
}

}  // namespace moetune::model
