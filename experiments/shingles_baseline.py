"""The Jaccard word-shingle baseline of Bogdanova et al. 2015 on the AskUbuntu pairs: shingle size and threshold
chosen on train, accuracy reported on test once.

    python -m experiments.shingles_baseline
"""

from __future__ import annotations

from semdup.core.fitting import pair_accuracy
from semdup.core.shingles import ShingleJaccardScorer, tune_shingle_size
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
from semdup.data import load_pairs_jsonl
from semdup.data.paths import askubuntu_files


def main() -> None:
    """ the Jaccard baseline on the AskUbuntu pairs (Bogdanova protocol):
    shingle size and threshold chosen on train, accuracy reported on test."""
    train_path, test_path = askubuntu_files()
    pipeline = TextPipeline(TextPipelineSettings())
    size, threshold, train_acc = tune_shingle_size(pipeline, load_pairs_jsonl(train_path))
    test = load_pairs_jsonl(test_path)
    scorer = ShingleJaccardScorer(pipeline, size)
    scores = [float(scorer.score(p.query, [p.candidate])[0]) for p in test]
    acc = pair_accuracy(scores, [p.duplicate for p in test], threshold)
    print(f"jaccard shingles: size {size}, threshold {threshold:.4f} (train accuracy {train_acc:.2f}); "
          f"test accuracy {acc:.2f} on {len(test)} pairs")


if __name__ == "__main__":
    main()
