"""A tiny random-weight Llama and a small BPE tokenizer, built at test time.

No model can be downloaded where the suite runs, and the scenarios need a real vLLM
server, not a good model: one layer, one attention head of size 64 (the CPU attention
refuses 16), a vocabulary of a few hundred tokens. Building it takes a few seconds.

Run as a script to build one by hand: `python tests/e2e/tiny_model.py DIR`.
"""

from __future__ import annotations

import sys
from pathlib import Path

_CORPUS = (
    "the quick brown fox jumps over the lazy dog. "
    "accelerator hosts keep engines clean and bound to the right cpus. "
    "a server answers a completion request with a few tokens. "
    "hello world, this is a tiny model for end to end tests of accelhost. "
)


def build_tiny_model(directory: Path) -> Path:
    """Write config, random weights and tokenizer into `directory` (created); return it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([_CORPUS] * 8, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.model_max_length = 256
    fast.save_pretrained(directory)

    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=256,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(directory)
    return directory


if __name__ == "__main__":
    print(build_tiny_model(Path(sys.argv[1])))
