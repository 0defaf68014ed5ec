#!/usr/bin/env bash
# There (GPU machine), after scripts/stage_gpu_binaries.sh here, with an older build's moetune.xz (e.g. a copy of
# an earlier .devcarry/moetune.xz) at $BEFORE:
#   run(command="BEFORE=.hq/before/moetune.xz bash scripts/gpu_before_after.sh [suite] [ref] [moon] [l12] [trace] [adamw] [gtest:FILTER]",
#       carry=[".devcarry", ".hq"])
# Same call, one GPU: the whole GPU suite; the reference job and Moonlight with HF, this build and the older binary
# side by side, this build profiled; the 12-layer cut at micro-batch 2 without clipping, both binaries; Moonlight's
# kernel timeline (bench/kernel_trace) for both binaries, with the GPU's clocks and power sampled; the staged AdamW
# kernel (AdamWAccess::stages, off by default until this has run): its bit-identity tests, then every variant timed
# over Moonlight's slots beside a device-to-device copy (target >= 4050 GB/s in pure bf16); gtest:FILTER, the GPU
# tests the filter names; moonkeys, Moonlight with HF and this build's defaults, then with each of MOETUNE_KEYS'
# settings (|-separated), then the older binary.
# Everything is written under /tmp/before_after and comes back as one archive in $OUT (at most 8 files return).
set -uo pipefail
back=${OUT:-}
OUT=/tmp/before_after source scripts/gpu_env.sh /tmp/before_after
root=$out
xz -dc "${BEFORE:?BEFORE=path of an older moetune.xz}" > /tmp/moetune_before; chmod +x /tmp/moetune_before
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
[ $# -eq 0 ] && set -- suite ref moon l12
for step in "$@"; do
  case $step in
    suite)
      stamp suite
      OUT=$root/suite TEST_TIMEOUT=300 bash scripts/gpu_check.sh tests > "$root/suite.log" 2>&1
      grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" "$root/suite.log" | head -14
      cp "$root/suite/gpu_tests.log" "$root/suite_gpu_tests.log" 2>/dev/null; rm -rf "$root/suite" ;;
    ref|moon)
      fam=qwen3_moe; [ $step = moon ] && fam=moonlight
      stamp "$fam: HF grouped_mm + merged main"
      OUT=$root/bench_$step bash bench/run.sh --family $fam --quick --no-compile --no-eager --no-skew > "$root/bench_$step.log" 2>&1
      stamp "$fam: main a6cf69e"
      MOETUNE=/tmp/moetune_before OUT=$root/before_$step bash bench/run.sh --family $fam --quick --no-hf --no-skew > "$root/before_$step.log" 2>&1
      stamp "$fam: merged main profiled"
      # bench/run.sh keeps the run's profile.json as moetune.profile.json (its output.dir is its own: overriding it
      # left the bench without the run's metrics).
      MOETUNE_SET="training.profile=true output.save_final=false" OUT=$root/prof_$step \
        bash bench/run.sh --family $fam --quick --no-hf --no-skew > "$root/prof_$step.log" 2>&1
      cp "$root/prof_$step/moetune.profile.json" "$root/profile_$step.json" 2>/dev/null
      [ $step = ref ] && python3 bench/moe_layer_tflops.py "$root/profile_$step.json" /tmp/moetune-bench/model 8192
      for d in bench before prof; do grep -hE "^\| (HF|moetune)" "$root/${d}_$step/results.md" 2>/dev/null | sed "s/^/$d: /"; done ;;
    moonkeys)
      # Moonlight: HF and this build's defaults, then this build with each of MOETUNE_KEYS' settings (|-separated;
      # one run each, same binary), then the older binary: which defaults to ship, measured in one call.
      stamp "moonlight: HF grouped_mm + this build's defaults"
      OUT=$root/bench_moonkeys bash bench/run.sh --family moonlight --quick --no-compile --no-eager --no-skew > "$root/bench_moonkeys.log" 2>&1
      grep -hE "^\| (HF|moetune)" "$root/bench_moonkeys/results.md" 2>/dev/null | sed "s/^/defaults: /"
      n=0
      IFS='|' read -ra settings <<< "${MOETUNE_KEYS:-}"
      for keys in "${settings[@]}"; do
        n=$((n + 1)); stamp "moonlight: $keys"
        MOETUNE_SET="$keys output.save_final=false" OUT=$root/keys_$n bash bench/run.sh --family moonlight --quick --no-hf --no-skew > "$root/keys_$n.log" 2>&1
        grep -hE "^\| moetune" "$root/keys_$n/results.md" 2>/dev/null | sed "s/^/$keys: /"
      done
      stamp "moonlight: the older binary"
      MOETUNE=/tmp/moetune_before OUT=$root/before_moonkeys bash bench/run.sh --family moonlight --quick --no-hf --no-skew > "$root/before_moonkeys.log" 2>&1
      grep -hE "^\| moetune" "$root/before_moonkeys/results.md" 2>/dev/null | sed "s/^/before: /" ;;
    l12)
      stamp "12 layers, micro-batch 2, no clipping"
      m=/tmp/moetune-memory/model12; d=/tmp/moetune-memory/data4096.jsonl; mkdir -p /tmp/moetune-memory
      [ -f $m/config.json ] || python3 bench/make_reference_model.py $m --skew none --layers 12 > "$root/make12.log" 2>&1
      [ -f $d ] || python3 bench/make_data.py $d --tokens-per-seq 4096 --sequences 32 --vocab 151936 > /dev/null 2>&1
      for bin in build/src/moetune/moetune /tmp/moetune_before; do
        rm -rf /tmp/l12run
        timeout 200 $bin finetune -c bench/reference_job.yaml --set model=$m --set data.train=$d --set training.max_steps=10 \
          --set output.dir=/tmp/l12run --set optimizer.max_grad_norm=0 > "$root/l12_$(basename $bin).log" 2>&1
        echo "$bin rc=$?: $(grep -E '^step 10/' "$root/l12_$(basename $bin).log")"
      done ;;
    trace)
      for who in after before; do
        bin=build/src/moetune/moetune; [ $who = before ] && bin=/tmp/moetune_before
        stamp "Moonlight traced: $who"
        nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 \
          > "$root/smi_$who.csv" 2>&1 &
        smi=$!
        CUDA_INJECTION64_PATH=$repo/.devcarry/libkernel_trace.so KERNEL_TRACE_OUT=$root/trace_$who MOETUNE=$bin \
          MOETUNE_SET="output.save_final=false" OUT=$root/traced_$who \
          bash bench/run.sh --family moonlight --quick --no-hf --no-skew > "$root/traced_$who.log" 2>&1
        kill $smi
        grep -hE "^\| moetune" "$root/traced_$who/results.md" 2>/dev/null | sed "s/^/traced $who: /"
        trace=$(ls -S "$root"/trace_$who.*.csv 2>/dev/null | head -1)
        [ -n "$trace" ] && python3 bench/kernel_trace/summary.py "$trace" --top 40 > "$root/trace_summary_$who.txt" 2>&1
        head -24 "$root/trace_summary_$who.txt"
        xz -T8 "$root"/trace_$who.*.csv
      done ;;
    gtest:*)
      filter=${step#gtest:}
      stamp "GPU tests: $filter"
      timeout 400 build/tests/moetune_tests --gtest_filter="$filter" > "$root/gtest_$(echo "$filter" | tr -c 'A-Za-z0-9' _ | cut -c1-40).log" 2>&1
      echo "tests rc=$?"; grep -hE "^\[  (FAILED|PASSED) |Failure|^\[       OK \]" "$root"/gtest_*.log | tail -30 ;;
    adamw)
      stamp "AdamW: staged kernel tests and timing"
      timeout 120 build/tests/moetune_tests --gtest_filter='AdamWGpu.*:OptimizerAccessGpu.*:AdamWInt8Gpu.*:GradNormGpu.*' \
        > "$root/adamw_tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (FAILED|PASSED) |Failure" "$root/adamw_tests.log" | head -20
      timeout 90 build/tests/moetune_tests --gtest_also_run_disabled_tests \
        --gtest_filter='OptimizerAccessGpu.DISABLED_TimesMoonlightSlots' > "$root/adamw_timing.log" 2>&1
      echo "timing rc=$?"; grep -E "^moonlight|copy|norm's pass|AdamW " "$root/adamw_timing.log" | sed -E 's/^  //' ;;
  esac
done
stamp done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
[ -n "$back" ] && tar -C "$root" -cJf "$back/before_after.tar.xz" .
