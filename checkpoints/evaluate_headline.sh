#!/usr/bin/env bash
# Every number docs/training.md quotes for the headline checkpoint, written to checkpoints/headline/eval/*.json.
# Run from the repository root with the virtual environment active:  bash checkpoints/evaluate_headline.sh
set -euo pipefail
ck=checkpoints/headline
mkdir -p "$ck/eval"
ev() { name=$1; shift; kmeans-circuits evaluate --checkpoint "$ck" --tasks 320 --steps 20 --threads 1 --json "$@" > "$ck/eval/$name.json"; }
ev in_distribution --datasets none
kmeans-circuits evaluate --checkpoint "$ck" --tasks 0 --steps 20 --threads 1 --json --datasets digits,blobs,wine,breast_cancer,iris --dataset-inits 10 > "$ck/eval/datasets.json"
ev kmeanspp --init k-means++ --datasets none
ev n128 --n 128 --datasets none
ev n2048 --n 2048 --datasets none
for family in laplace gumbel lognormal cauchy; do ev "family_$family" --family "$family" --datasets none; done
kmeans-circuits drift --checkpoint "$ck" --out "$ck/drift.html" --tasks 32 --threads 1 --json > "$ck/eval/drift.json"
