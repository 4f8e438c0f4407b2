"""The text notebook 07's capstone trains on: the Python standard library's own source, which every Python
installation carries, so nothing is downloaded. About 11 MB of code and docstrings, 4 million tokens.

Tokens are words (runs of letters and underscores), single digits, single punctuation marks, newlines and runs of
spaces; the vocabulary is the `vocab_size - 1` most frequent of them plus an unknown-token id 0. The standard
library holds about 42,000 distinct tokens, so a 32k vocabulary covers all but the rarest identifiers, and the
output layer is as wide as a real model's. The files are read in sorted order and ties in frequency are broken
by the token's text: the same Python gives the same ids on every machine.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import sysconfig

import torch

TOKEN = re.compile(r"[A-Za-z_]+|\d|\n| +|[^\sA-Za-z_\d]")
SKIPPED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__", "turtledemo"}
UNKNOWN = "<unk>"


@dataclasses.dataclass(frozen=True)
class Corpus:
    tokens: torch.Tensor  # int64 ids, the whole text in file order
    vocab: tuple[str, ...]  # id -> token; vocab[0] is the unknown token
    files: int
    characters: int

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids)

    def coverage(self) -> float:
        """The fraction of the text's tokens that the vocabulary holds (not mapped to the unknown id)."""
        return float((self.tokens != 0).float().mean())

    def describe(self) -> str:
        return (f"{self.files} files of the Python {sysconfig.get_python_version()} standard library, "
                f"{self.characters / 1e6:.1f} M characters, {len(self.tokens) / 1e6:.2f} M tokens, vocabulary "
                f"{len(self.vocab)} ({100 * self.coverage():.2f}% of the tokens in it)")


def source_files(root: str | None = None) -> list[str]:
    root = root or sysconfig.get_paths()["stdlib"]
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        found += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    if not found:
        raise FileNotFoundError(f"no Python source under {root}: this Python ships its standard library compiled "
                                "only; point load_corpus(root=...) at a folder of .py files")
    return found


_CACHE: dict = {}


def load_corpus(vocab_size: int = 32768, root: str | None = None, max_characters: int | None = None) -> Corpus:
    """The standard library's source as token ids over its `vocab_size` most frequent tokens (kept in memory
    after the first call: tokenising takes a few seconds)."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2 (the unknown token and one more), got {vocab_size}")
    key = (vocab_size, root, max_characters)
    if key in _CACHE:
        return _CACHE[key]
    files = source_files(root)
    parts, total = [], 0
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
        total += len(parts[-1])
        if max_characters is not None and total >= max_characters:
            break
    text = "".join(parts)[:max_characters]
    words = TOKEN.findall(text)
    counts = collections.Counter(words)
    kept = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - 1]
    vocab = (UNKNOWN, *(w for w, _ in kept))
    index = {w: i for i, w in enumerate(vocab)}
    ids = torch.tensor([index.get(w, 0) for w in words], dtype=torch.int64)
    corpus = Corpus(tokens=ids, vocab=vocab, files=len(parts), characters=len(text))
    _CACHE[key] = corpus
    return corpus


def token_ids(vocab_size: int) -> torch.Tensor:
    """The text's ids under a vocabulary of the `vocab_size` most frequent tokens: the 32k vocabulary's ids with
    every id past vocab_size made unknown (0), since its vocabulary lists tokens most frequent first. One
    tokenisation serves every size."""
    if vocab_size > 32768:
        return load_corpus(vocab_size).tokens
    ids = load_corpus(32768).tokens
    return torch.where(ids < vocab_size, ids, torch.zeros((), dtype=ids.dtype))


def batches(tokens: torch.Tensor, batch: int, seq_len: int, steps: int, seed: int = 0):
    """`steps` (inputs, targets) pairs of shape (batch, seq_len): windows at random offsets (the same for a
    seed), targets the inputs shifted by one token."""
    if tokens.numel() < seq_len + 2:
        raise ValueError(f"the text has {tokens.numel()} tokens, fewer than a window of {seq_len} + 1")
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, tokens.numel() - seq_len - 1, (batch,), generator=gen)
        window = torch.stack([tokens[s:s + seq_len + 1] for s in starts.tolist()])
        yield window[:, :-1].contiguous(), window[:, 1:].contiguous()
