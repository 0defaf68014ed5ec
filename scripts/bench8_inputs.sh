# Sourced by the GPU scripts (gpu_parallel_check.sh's bench step, gpu_nemo_bench.sh) so that every runner of
# issue 10's benchmark reads the same inputs: the 8-layer cut of Qwen3-30B-A3B with random weights, made once
# ($model), and 64 random 4096-token lines ($data), both under $scratch. Needs `scratch` and `out`.
make_bench8_inputs() {
  model=$scratch/model8
  data=$scratch/data.jsonl
  [ -f "$model/config.json" ] || python3 bench/make_reference_model.py "$model" --skew none --layers 8 > "$out/make_model.log" 2>&1 \
    || { tail "$out/make_model.log"; return 1; }
  local vocab
  vocab=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/config.json"))["vocab_size"])' "$model")
  python3 bench/make_data.py "$data" --tokens-per-seq 4096 --sequences 64 --vocab "$vocab" > /dev/null 2>&1
}
