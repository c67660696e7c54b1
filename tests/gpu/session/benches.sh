#!/bin/bash
# The verify invocations the H200 sessions from s19 on run (sourced after lib.sh): one definition
# each, so a later session runs what an earlier one ran and its figures compare. Gemma-4-26B-A4B
# and Qwen3.6-35B-A3B shapes, dummy weights; every timed window alone on the GPU (lib.sh).
SPLITKV=/tmp/site-splitkv   # s19-s21: 0.27.1 with the then-candidate split-KV patch (patched_copy,
                            # lib.sh); shipped since, a plain `build.py apply` carries it

SMOKE=(--target h200 --dummy --layers 10 --attention-backend TRITON_ATTN --max-model-len 4096
       --gpu-memory-utilization 0.1 --kv-cache-gib 2 --moe-config-dir patches/moe-configs)
SMOKE26=(--recipe gemma-4-26b-a4b-it "${SMOKE[@]}")
QWEN=(--recipe qwen3.6-35b-a3b --target h200 --dummy --layers 8 --lossless --max-model-len 4096
      --gpu-memory-utilization 0.15 --kv-cache-gib 2 --attention-backend TRITON_ATTN
      --moe-config-dir patches/moe-configs)
BENCH=(--target h200 --dummy --parallel --gpu-memory-utilization 0.08 --kv-cache-gib 1
       --max-model-len 4096 --attention-backend TRITON_ATTN --moe-config-dir patches/moe-configs
       --windows "sustained,conc8,conc16" --sustained-tokens 256 --repeat 2 --configs ""
       --profile spark343=0.84/0.60/0.39/0.27 --profile seed87=rate@0.87)
STOCK="name=stock,dtype=auto,runner=default,attention=default,compile=inductor"
PEER="name=peer-bf16-mtp4,dtype=bf16,k=4,runner=default,attention=default,compile=inductor,moe=none"
bench30() {   # 0.27.1 at 30 layers: stock and the recipe in one wave, the plain engine and the candidate in the next
  PYTHONPATH=$1 timeout 1450 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 30 "${BENCH[@]}" --gpu-memory-utilization 0.25 --kv-cache-gib 2 --max-parallel 2 --timeout 700 \
    --engine "$STOCK" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2-splitkv,k=4,runner=v2,site=$SPLITKV" \
    --out $W/bench30
}

bench10() {   # 0.27.1 at 10 layers: stock, the peer (vllm-project/recipes, BF16 k=4) and the recipe at once
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" --timeout 1100 \
    --engine "$STOCK" --engine "$PEER" --engine "name=fp8-mtp4-v2,k=4,runner=v2" --out $W/bench10
}

bench_qwen() {   # the Qwen recipe (fp8, V1, k=2) against its plain engine, 0.27.1
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe qwen3.6-35b-a3b --layers 8 "${BENCH[@]}" \
    --timeout 1100 --engine "name=fp8-v1,k=0,runner=v1" --engine "name=fp8-mtp2-v1,k=2,runner=v1" \
    --engine "name=fp8-mtp1-v1,k=1,runner=v1" --out $W/bench-qwen
}

bench_qwen_v2() {   # the Qwen recipe's settings on V2: its plain engine and k=2 (s20, started by hand)
  PYTHONPATH=$1 timeout 560 python3 -m verify.bench --recipe qwen3.6-35b-a3b --layers 8 "${BENCH[@]}" \
    --windows sustained --timeout 540 --engine "name=fp8-v2,k=0,runner=v2" \
    --engine "name=fp8-mtp2-v2,k=2,runner=v2" --out $W/bench-qwen-v2
}

bench33() {   # 0.33.0 at 10 layers: stock (FA4 per layer), the recipe on TRITON_ATTN and on FA4
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" --timeout 1100 \
    --engine "$STOCK" --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8-mtp4-v2-fa4,k=4,runner=v2,attention=default" --out $W/bench33
}

profile() {   # name, PYTHONPATH, k
  PYTHONPATH=$2 timeout 1150 python3 -m verify.profile --recipe gemma-4-26b-a4b-it --target h200 \
    --dummy --layers 30 --k "$3" --tokens 128 --attention-backend TRITON_ATTN \
    --moe-config-dir patches/moe-configs --gpu-memory-utilization 0.25 --kv-cache-gib 2 \
    --max-model-len 8192 --max-seconds 1100 --out "$W/$1"
}

# s23 on: the attention candidates at long context and any recipe's profile
HEAD512=/tmp/site-head512   # the shipped 0.27.1 install plus triton-attn-head512-launch
GROUPKV=/tmp/site-groupkv   # the shipped 0.27.1 install plus triton-attn-group-kv-heads

bench_long_attn() {   # 0.27.1, 10 layers: each attention candidate against the recipe at long context
  PYTHONPATH=$1 timeout 1150 python3 -m verify.bench --recipe gemma-4-26b-a4b-it --shape 26b-a4b \
    --layers 10 "${BENCH[@]}" --max-model-len 33024 --kv-cache-gib 8 --timeout 1100 --start-timeout 600 \
    --windows "long8k,long32k,long8k-conc8,long8k-conc16,long32k-conc8" --long-tokens 128 \
    --engine "name=fp8-v2,k=0,runner=v2" --engine "name=fp8-mtp4-v2,k=4,runner=v2" \
    --engine "name=fp8-v2-head512,k=0,runner=v2,site=$HEAD512" \
    --engine "name=fp8-mtp4-v2-head512,k=4,runner=v2,site=$HEAD512" \
    --engine "name=fp8-v2-groupkv,k=0,runner=v2,site=$GROUPKV" \
    --engine "name=fp8-mtp4-v2-groupkv,k=4,runner=v2,site=$GROUPKV" --out $W/bench-long-attn
}

profile_recipe() {   # name, PYTHONPATH, recipe, layers, k, GPU memory utilization: s18's profile
  # settings (profile above), each cut at 600 s so that no profile holds the next job back longer (s18's
  # took 275-287 s beside other jobs)
  PYTHONPATH=$2 timeout 660 python3 -m verify.profile --recipe "$3" --target h200 --dummy \
    --layers "$4" --k "$5" --tokens 128 --attention-backend TRITON_ATTN \
    --moe-config-dir patches/moe-configs --gpu-memory-utilization "$6" --kv-cache-gib 2 \
    --max-model-len 8192 --max-seconds 600 --out "$W/$1"
}

profile_long() {   # name, PYTHONPATH, recipe, layers, k, GPU memory utilization, prompt tokens: profile_recipe's
  # settings over a long prompt (s25: the k=4 step cost 12.0 ms at 32k tokens against 5.0 at 8k in s24's
  # bench, the plain step 2.8 ms at both); room for the prompt, the replies and one spec step beyond
  PYTHONPATH=$2 timeout 660 python3 -m verify.profile --recipe "$3" --target h200 --dummy \
    --layers "$4" --k "$5" --tokens 128 --prompt-tokens "$7" --attention-backend TRITON_ATTN \
    --moe-config-dir patches/moe-configs --gpu-memory-utilization "$6" --kv-cache-gib 4 \
    --max-model-len 33024 --max-seconds 600 --out "$W/$1"
}
