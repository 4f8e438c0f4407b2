"""The sizes the course picks from a GPU's free memory: one place for notebook 05's demonstrations and for
`python -m autograder device`, so that what the command promises is what the notebook does.

Everything else is sized the same on every GPU: the graded shapes (small) and the benchmark shapes of the
performance criterion (see `lines`), whose unfused eager yardstick is left out, and not required, where it
does not fit (criteria.at_size.eager_if_it_fits).
"""

from __future__ import annotations

# Notebook 05, attention over sequence lengths: (B, H, D) in bfloat16 on a GPU.
ATTENTION_BHD = (4, 16, 128)
ATTENTION_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
NAIVE_BYTES_PER_SCORE = 12  # naive attention at its peak: S, its float32 copy, the float32 softmax (~10 measured)
NAIVE_SHARE = 0.9  # of the free memory naive attention may take

# Notebook 05, linear + cross-entropy: M x K hidden states against vocabularies of V words, bfloat16.
CE_MK = (8192, 4096)
CE_VOCABS = (16384, 32768, 65536, 128256)
EAGER_BYTES_PER_LOGIT = 8  # eager's peak beyond its inputs: 7.8 GiB at M = 8192, V = 128256 (bf16, measured)
CE_SHARE = 0.8


def naive_attention_bytes(n: int, b: int = ATTENTION_BHD[0], h: int = ATTENTION_BHD[1]) -> int:
    return NAIVE_BYTES_PER_SCORE * b * h * n * n


def eager_cross_entropy_bytes(v: int, m: int = CE_MK[0], k: int = CE_MK[1]) -> int:
    return EAGER_BYTES_PER_LOGIT * m * v + 2 * v * k


def naive_attention_lengths(free_bytes: float, lengths=ATTENTION_LENGTHS) -> list[int]:
    """The sequence lengths at which naive attention is run next to the fused versions."""
    return [n for n in lengths if naive_attention_bytes(n) <= NAIVE_SHARE * free_bytes]


def eager_cross_entropy_vocabs(free_bytes: float, vocabs=CE_VOCABS, m: int = CE_MK[0], k: int = CE_MK[1]) -> list[int]:
    """The vocabularies the cross-entropy comparison runs at (eager's logits must fit); at least the smallest."""
    return [v for v in vocabs if eager_cross_entropy_bytes(v, m, k) <= CE_SHARE * free_bytes] or list(vocabs[:1])


def lines(free_bytes: float) -> list[str]:
    """What `python -m autograder device` says about sizes on a GPU with free_bytes free."""
    gib = free_bytes / 2**30
    naive = naive_attention_lengths(free_bytes)
    vocabs = eager_cross_entropy_vocabs(free_bytes)
    b, h, d = ATTENTION_BHD
    out = [f"sizes         from {gib:.1f} GiB free:"]
    left = [n for n in ATTENTION_LENGTHS if n not in naive]
    out.append(f"  05 attention ({b}, {h}, N, {d}): every version at N = {', '.join(map(str, ATTENTION_LENGTHS))}; naive "
               + (f"up to N = {max(naive)}" if naive else "at none") + (
                   f" (N = {', '.join(map(str, left))} would need "
                   f"{naive_attention_bytes(left[0]) / 2**30:.0f}+ GiB)" if left else ""))
    dropped = [v for v in CE_VOCABS if v not in vocabs]
    out.append(f"  05 cross-entropy {CE_MK[0]} x {CE_MK[1]}: V = {', '.join(map(str, vocabs))}" + (
        f" (V = {', '.join(map(str, dropped))} left out: eager's logits need "
        f"{eager_cross_entropy_bytes(dropped[0]) / 2**30:.1f}+ GiB)" if dropped else ""))
    out.append("  graded shapes and benchmark shapes: the same on every GPU; an eager yardstick that does not fit "
               "is not timed and not required")
    return out
