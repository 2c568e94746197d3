"""`bench pipeline --real`: a real tokenizer and a real (small) model, made on the spot.

Nothing is downloaded: the tokenizer's vocabulary is trained here on the text below and
the model's weights are random (seeded). What matters for the benchmark is that the
three stages do the real kinds of work: Rust tokenization, torch kernels that release the
GIL, and Python-side decoding.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from accelhost.bench.pipeline import Workload
from accelhost.errors import AccelhostError

CORPUS = """\
An inference server spends its life in three rooms. In the first, requests arrive as
text and leave as token ids: the tokenizer splits words into pieces it has seen before.
In the second, the device multiplies those ids through layer after layer of weights.
In the third, the ids that come back are turned into words again and sent to the user.
When the rooms take turns, the device waits while the host reads and writes text.
When the rooms work at the same time, joined by short queues, the slowest room sets the
pace and the device is busy nearly all the time. Queues must be bounded, or a fast room
fills the memory with work that the slow room cannot take. Errors must name the request
that caused them, and stopping must stop every room, not just the one that noticed.
The kitchen analogy is an old one: the cook should not wait for the waiter to clear the
table before starting the next dish. Pinned host memory lets the copy engine read the
batch without the processor's help, and a side stream lets the copy of the next batch
overlap the compute of this one. An event recorded after each copy tells the compute
stream when to start, and nobody needs to stop the whole device to find out.
Tokenizers written in Rust release the interpreter lock while they work, and so do the
kernels of a tensor library; pure Python code does not, and that is why the rooms that
run Python are often better placed in separate processes.
"""


def real_workload(n: int, batch: int = 16, seq_len: int = 64) -> Workload:
    """The workload of `n` items, each a batch of `batch` sentences (as a server's dynamic
    batcher would hand over), warmed up: first calls allocate and compile."""
    missing = []
    for name in ("torch", "tokenizers"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's CPU build warns when numpy is absent
            try:
                importlib.import_module(name)
            except ImportError:
                missing.append(name)
    if missing:
        raise AccelhostError(
            f"--real needs {' and '.join(missing)}: pip install 'accelhost[torch,real]'"
        )
    import torch  # type: ignore[import-not-found,unused-ignore]
    from tokenizers import (  # type: ignore[import-not-found,unused-ignore]
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )

    torch.manual_seed(0)
    torch.set_num_threads(1)  # the "device" must not take the host's cores away
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["[PAD]", "[UNK]"], show_progress=False
    )
    lines = [s.strip() + "." for s in " ".join(CORPUS.split()).split(".") if s.strip()]
    tok.train_from_iterator(lines, trainer)
    vocab = tok.get_vocab_size()

    model = torch.nn.Sequential(
        torch.nn.Embedding(vocab, 128),
        torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(128, 4, 512, batch_first=True, dropout=0.0),
            num_layers=2,
            enable_nested_tensor=False,
        ),
        torch.nn.Linear(128, vocab),
    ).eval()

    def tokenize(texts: list[str]) -> Any:
        rows = [e.ids[:seq_len] for e in tok.encode_batch(texts)]
        return torch.tensor([r + [0] * (seq_len - len(r)) for r in rows], dtype=torch.long)

    def forward(ids: Any) -> Any:
        with torch.inference_mode():
            return model(ids).argmax(-1)

    def detokenize(out: Any) -> list[str]:
        return [str(t) for t in tok.decode_batch(out.tolist())]

    items = [[lines[(i * batch + j) % len(lines)] for j in range(batch)] for i in range(n)]
    label = f"real: tokenizers + torch model, {batch} sentences per item"
    for item in items[:8]:
        detokenize(forward(tokenize(item)))
    return Workload(tokenize, forward, detokenize, items, None, label)
