"""The ``log-classifier`` reference model: a small transformer encoder over log messages.

A byte-pair-encoding tokenizer (lowercased, split on whitespace and punctuation, ``[PAD]`` = 0, ``[UNK]``, a
``[CLS]`` prepended to every message, truncation to :data:`MAX_LENGTH`) is trained on the generated corpus
and saved next to the model. The encoder is pre-LayerNorm, with learned positions, attention that ignores
padded keys and a mean over the unpadded positions, so an item's result does not depend on how far its
batch was padded.

Graph contract: inputs ``input_ids`` int64 [batch, seq] and ``attention_mask`` int64 [batch, seq] (1 for
real tokens), both axes dynamic; positions beyond MAX_LENGTH are ignored. Outputs ``class_index`` int64
[batch] (index into :data:`LOG_LABELS`) and ``score`` float32 [batch] (its softmax probability).
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from typing import TYPE_CHECKING

import numpy as np
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from torch import nn
from torch.nn import functional as F  # noqa: N812 - the conventional name

from modelbuild.export import export_onnx, ort_session, run_session, save_onnx
from modelbuild.types import BuiltModel
from service.tools.generate import LOG_LABELS, EventGenerator

if TYPE_CHECKING:
    from onnxruntime import InferenceSession

NAME = "log-classifier"
VERSION = "1"
FILE = f"{NAME}.onnx"
TOKENIZER_FILE = f"{NAME}.tokenizer.json"
TEXT_FIELD = "message"
MAX_LENGTH = 64

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]")  # ids 0, 1, 2 in this order
VOCAB_SIZE = 3000

TRAIN_EVENTS = 16_000
VALIDATION_EVENTS = 2_000
HOLDOUT_EVENTS = 5_000
HOLDOUT_SEED_OFFSET = 1_000

D_MODEL = 64
HEADS = 4
LAYERS = 2
FF = 128
DROPOUT = 0.1
EPOCHS = 3
BATCH = 64
LR = 2e-3

# Added to the attention logits of padded keys. Large enough that exp() underflows to exactly 0 in float32
# (so padding has no influence at all), finite so that an all-padding row gives a uniform average, not NaN.
_MASKED = -1e9


def train_tokenizer(texts: list[str]) -> Tokenizer:
    """A byte-pair-encoding tokenizer fitted to ``texts``, with truncation and batch padding configured in it.

    BPE without a continuing-subword prefix, because that trainer is deterministic: the WordPiece trainer
    (and BPE with a ``##`` prefix) numbers the prefixed pieces in hash-map order, which breaks ties between
    equally frequent merges differently from run to run (huggingface/tokenizers#1794), so a rebuild would
    give a different vocabulary and different weights.
    """
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()  # whitespace, then every punctuation char alone
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=list(SPECIAL_TOKENS), show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    cls_id = tok.token_to_id("[CLS]")
    # [CLS] first: never an empty sequence (an empty message still has one token to pool).
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A", special_tokens=[("[CLS]", cls_id)])
    # Stored in the tokenizer file, so a consumer loading it gets the same truncation and padding.
    tok.enable_truncation(max_length=MAX_LENGTH)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    if tok.token_to_id("[PAD]") != 0:
        raise AssertionError("[PAD] must have id 0")
    return tok


def encode(tok: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Texts -> (input_ids, attention_mask) int64 [n, longest-in-batch], as the service feeds the graph."""
    encodings = tok.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


class _Block(nn.Module):
    """Pre-LN transformer encoder layer with explicit attention (exports to plain ONNX ops)."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.ff1 = nn.Linear(D_MODEL, FF)
        self.ff2 = nn.Linear(FF, D_MODEL)
        self.drop = nn.Dropout(DROPOUT)

    def forward(self, h: torch.Tensor, key_bias: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = h.shape
        head_dim = D_MODEL // HEADS
        qkv = self.qkv(self.ln1(h)).reshape(batch, seq, 3, HEADS, head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [batch, heads, seq, head_dim]
        logits = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(head_dim)) + key_bias
        attn = self.drop(torch.softmax(logits, dim=-1))
        context = (attn @ v).transpose(1, 2).reshape(batch, seq, D_MODEL)
        h = h + self.drop(self.proj(context))
        return h + self.drop(self.ff2(F.gelu(self.ff1(self.ln2(h)))))


class LogClassifier(nn.Module):
    """Embeddings + learned positions -> encoder blocks -> masked mean pool -> linear head."""

    def __init__(self, vocab_size: int, n_classes: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, D_MODEL, padding_idx=0)
        self.positions = nn.Embedding(MAX_LENGTH, D_MODEL)
        self.blocks = nn.ModuleList(_Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, n_classes)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Ignore anything past MAX_LENGTH rather than fail on a position with no embedding.
        input_ids = input_ids[:, :MAX_LENGTH]
        mask = attention_mask[:, :MAX_LENGTH].to(torch.float32)
        seq = input_ids.shape[1]
        h = self.tokens(input_ids) + self.positions(torch.arange(seq, device=input_ids.device))
        key_bias = ((1.0 - mask) * _MASKED)[:, None, None, :]  # [batch, 1, 1, seq]
        for block in self.blocks:
            h = block(h, key_bias)
        h = self.norm(h)
        weights = mask[:, :, None]
        pooled = (h * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(self.logits(input_ids, attention_mask), dim=-1)
        score, class_index = probs.max(dim=-1)
        return class_index, score


def _batches(lengths: np.ndarray, gen: torch.Generator) -> list[torch.Tensor]:
    """Shuffled minibatches of similar length: random order, sorted within chunks of 50 batches.

    Keeps padding (and so the cost of a step) low without always showing the model the same neighbours.
    """
    perm = torch.randperm(len(lengths), generator=gen)
    chunk = BATCH * 50
    batches: list[torch.Tensor] = []
    for start in range(0, len(perm), chunk):
        part = perm[start : start + chunk]
        part = part[torch.from_numpy(np.argsort(lengths[part.numpy()], kind="stable"))]
        batches.extend(part[i : i + BATCH] for i in range(0, len(part), BATCH))
    order = torch.randperm(len(batches), generator=gen)
    return [batches[i] for i in order.tolist()]


def _train(model: LogClassifier, ids: np.ndarray, mask: np.ndarray, labels: np.ndarray, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    lengths = mask.sum(axis=1)
    ids_t, mask_t, labels_t = torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(labels)
    steps_per_epoch = len(_batches(lengths, torch.Generator().manual_seed(0)))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=EPOCHS * steps_per_epoch)
    model.train()
    for _ in range(EPOCHS):
        for idx in _batches(lengths, gen):
            width = int(lengths[idx.numpy()].max())  # trim the corpus-wide padding to this batch's longest
            loss = F.cross_entropy(model.logits(ids_t[idx, :width], mask_t[idx, :width]), labels_t[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            sched.step()
    model.eval()


def build(out_dir: pathlib.Path, seed: int) -> BuiltModel:
    """Train tokenizer and model, export to ``out_dir``, validate and measure holdout accuracy with ORT."""
    started = time.perf_counter()
    events, labels = EventGenerator(seed).logs_labeled(TRAIN_EVENTS + VALIDATION_EVENTS)
    texts = [e[TEXT_FIELD] for e in events]
    tok = train_tokenizer(texts[:TRAIN_EVENTS])
    ids, mask = encode(tok, texts)
    model = LogClassifier(tok.get_vocab_size(), len(LOG_LABELS))
    _train(model, ids[:TRAIN_EVENTS], mask[:TRAIN_EVENTS], labels[:TRAIN_EVENTS], seed)
    train_seconds = time.perf_counter() - started

    with torch.no_grad():
        val_pred = model(torch.from_numpy(ids[TRAIN_EVENTS:]), torch.from_numpy(mask[TRAIN_EVENTS:]))[0]
    val_accuracy = float((val_pred.numpy() == labels[TRAIN_EVENTS:]).mean())

    tok.save(str(out_dir / TOKENIZER_FILE))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    example = (torch.from_numpy(ids[:4, :24].copy()), torch.from_numpy(mask[:4, :24].copy()))
    onnx_model = export_onnx(
        model,
        example,
        input_names=["input_ids", "attention_mask"],
        output_names=["class_index", "score"],
        dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        metadata={
            "microbatch.name": NAME,
            "microbatch.version": VERSION,
            "microbatch.processor": "text",
            "microbatch.text_field": TEXT_FIELD,
            "microbatch.max_length": str(MAX_LENGTH),
            "microbatch.labels": json.dumps(list(LOG_LABELS)),
            "microbatch.tokenizer": TOKENIZER_FILE,
            "microbatch.description": (
                "Transformer encoder classifying log messages into operational categories; "
                "class_index indexes microbatch.labels, score is its softmax probability."
            ),
        },
    )
    path = out_dir / FILE
    save_onnx(onnx_model, path)
    session = ort_session(path)
    _validate(session, model, tok, texts[TRAIN_EVENTS:])
    quality = evaluate(
        session, Tokenizer.from_file(str(out_dir / TOKENIZER_FILE)), seed + HOLDOUT_SEED_OFFSET
    )
    quality["validation_accuracy"] = round(val_accuracy, 4)
    return BuiltModel(
        name=NAME,
        version=VERSION,
        processor="text",
        file=FILE,
        extra_files={"tokenizer": TOKENIZER_FILE},
        quality=quality,
        train_seconds=train_seconds,
    )


def _validate(session: InferenceSession, model: LogClassifier, tok: Tokenizer, texts: list[str]) -> None:
    """ONNX must match torch on batch sizes 1, 3, 16 and several sequence lengths, and ignore padding."""
    by_length = sorted(texts, key=len)
    samples = [by_length[:1], by_length[:3], texts[:16], by_length[-3:], by_length[len(texts) // 2 :][:16]]
    for group in samples:
        ids, mask = encode(tok, group)
        out = run_session(session, {"input_ids": ids, "attention_mask": mask})
        with torch.no_grad():
            cls, score = model(torch.from_numpy(ids), torch.from_numpy(mask))
        if out["class_index"].dtype != np.int64 or out["score"].dtype != np.float32:
            raise AssertionError(f"{NAME}: unexpected output types {out}")
        if not np.array_equal(out["class_index"], cls.numpy()):
            raise AssertionError(f"{NAME}: class_index differs between torch and onnxruntime")
        np.testing.assert_allclose(out["score"], score.numpy(), rtol=1e-4, atol=1e-5)
    # Padding invariance: the shortest message alone vs. in a batch with the longest one.
    short, long = by_length[0], by_length[-1]
    alone = run_session(
        session, dict(zip(("input_ids", "attention_mask"), encode(tok, [short]), strict=True))
    )
    padded = run_session(
        session, dict(zip(("input_ids", "attention_mask"), encode(tok, [short, long]), strict=True))
    )
    if (
        alone["class_index"][0] != padded["class_index"][0]
        or abs(alone["score"][0] - padded["score"][0]) > 1e-4
    ):
        raise AssertionError(f"{NAME}: result depends on batch padding")
    # Longer than MAX_LENGTH (a caller that does not truncate) must still run.
    ids, mask = encode(tok, [long])
    wide = np.concatenate([ids, np.zeros((1, MAX_LENGTH), np.int64)], axis=1)
    wide_mask = np.concatenate([mask, np.zeros((1, MAX_LENGTH), np.int64)], axis=1)
    over = run_session(session, {"input_ids": wide, "attention_mask": wide_mask})
    if over["class_index"][0] != padded["class_index"][1]:
        raise AssertionError(f"{NAME}: inputs longer than {MAX_LENGTH} give a different class")


def evaluate(session: InferenceSession, tok: Tokenizer, holdout_seed: int, batch: int = 64) -> dict:
    """Accuracy of an exported model (with its tokenizer) on fresh generated log events."""
    events, labels = EventGenerator(holdout_seed).logs_labeled(HOLDOUT_EVENTS)
    texts = [e[TEXT_FIELD] for e in events]
    pred = np.empty(len(texts), dtype=np.int64)
    for start in range(0, len(texts), batch):
        ids, mask = encode(tok, texts[start : start + batch])
        pred[start : start + batch] = run_session(session, {"input_ids": ids, "attention_mask": mask})[
            "class_index"
        ]
    recall = {label: round(float((pred[labels == i] == i).mean()), 4) for i, label in enumerate(LOG_LABELS)}
    return {
        "accuracy": round(float((pred == labels).mean()), 4),
        "recall_by_class": recall,
        "holdout_events": HOLDOUT_EVENTS,
        "holdout_seed": holdout_seed,
    }
