#!/usr/bin/env bash
# Runs one experiment as a Slurm job array, one shard per task, then merges the shards.
#   slurm/submit_shards.sh RUN_DIR N_SHARDS [magma-run overrides...]
#   e.g. slurm/submit_shards.sh runs/locomo_magma 10 dataset=locomo dataset.path=$PWD/locomo10.json memory=magma
# Prints "<array job id> <aggregate job id>"; the merged run folder is RUN_DIR/merged.
# magma-run and magma-aggregate must be on PATH (activate the venv); sbatch options come from
# the templates and the usual SBATCH_* environment variables (SBATCH_PARTITION, SBATCH_ACCOUNT).
set -euo pipefail
die() { echo "submit_shards: $*" >&2; exit 1; }
[[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || die "usage: $0 RUN_DIR N_SHARDS [magma-run overrides...]"
run_dir=$(realpath -m "$1"); n=$2; shift 2
for a in "$@"; do   # each shard's folder is RUN_DIR/shard_<i>: an override of it would put every shard in one
  key=${a#+}; key=${key#+}; key=${key%%=*}
  [[ $key == out_dir || $key == hydra.run.dir || $key == dataset.shard ]] \
    && die "$a: each shard writes RUN_DIR/shard_<i> with its own dataset.shard; leave out $key"
done
here=$(cd "$(dirname "$0")" && pwd)
command -v sbatch >/dev/null || die "sbatch not found: no Slurm client on this machine"
command -v magma-run >/dev/null || die "magma-run not on PATH: activate the magma_torch venv first"
mkdir -p "$run_dir"
submit() {  # sbatch's own message on failure, as one line
  local out
  out=$(sbatch --parsable --export=ALL,RUN_DIR="$run_dir" "$@" 2>&1) || die "sbatch failed: ${out//$'\n'/ }"
  echo "${out%%;*}"
}
array=$(submit --array=0-$((n - 1)) --output="$run_dir/slurm-%A_%a.out" "$here/run_shard.sbatch" "$@")
agg=$(submit --dependency=afterok:"$array" --kill-on-invalid-dep=yes --output="$run_dir/slurm-%j-aggregate.out" \
  "$here/aggregate.sbatch")
echo "$array $agg"
