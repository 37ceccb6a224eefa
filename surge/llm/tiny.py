"""The built-in language model: a tiny Llama and a character tokenizer, made here.

No weights exist on these machines and nothing may download, so the built-in LLM presets
train their own model (a supervised warm start, then RL). Both pieces are plain Hugging Face
objects: `save_pretrained` writes a directory that `AutoModelForCausalLM` and
`AutoTokenizer` load with no surge installed, and a user's own model directory takes their
place (`model.path`).

Defaults (about 1M parameters: hidden 128, 4 layers, 4 heads of 32) follow the measured
TRL setup in ../shared/reference/llmrl.md 8.4, so the comparison with TRL starts from the
same kind of model.
"""

from __future__ import annotations

from typing import Any

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
ARITHMETIC_ALPHABET = "0123456789+="
COUNTDOWN_ALPHABET = "0123456789+-*/() >:"


def char_tokenizer(alphabet: str) -> Any:
    """A `PreTrainedTokenizerFast` with one token per character of `alphabet` (after the
    special tokens <pad> <bos> <eos> <unk>); decoding joins characters back without spaces.
    Encoding with special tokens (the default of `tokenizer(text)`) starts with <bos>, as
    Llama's tokenizers do: the model always saw <bos> first (surge/llm/model.py
    `encode_prompt`), so a saved run's tokenizer gives plain transformers the same inputs."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = list(dict.fromkeys(alphabet))
    vocab = {token: i for i, token in enumerate([*SPECIALS, *chars])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    # One piece per character, newlines too ("." skips them, so "\n\n" was one unknown piece).
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK
    )


def tiny_config(
    vocab_size: int, hidden: int = 128, layers: int = 4, heads: int = 4, max_length: int = 64
) -> Any:
    """The `LlamaConfig` of the built-in model."""
    from transformers import LlamaConfig

    if hidden % heads or hidden // heads < 32:
        raise ValueError(f"hidden={hidden}, heads={heads}: want a head size of at least 32")
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=4 * hidden,  # 1.05M parameters at the defaults, as TRL was measured
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_length,
        pad_token_id=SPECIALS.index(PAD),
        bos_token_id=SPECIALS.index(BOS),
        eos_token_id=SPECIALS.index(EOS),
        tie_word_embeddings=True,
    )


def tiny_llama(
    vocab_size: int,
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    max_length: int = 64,
    seed: int = 0,
) -> Any:
    """A freshly initialised `LlamaForCausalLM` (seeded) of `hidden` x `layers`."""
    import torch
    from transformers import LlamaForCausalLM

    config = tiny_config(vocab_size, hidden, layers, heads, max_length)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


GUESS_ALPHABET = "0123456789<>=?- \nguesS:"
"""Guess (surge/llm/agent_tasks.py): its prompt, guesses, feedback, summaries and "S:"."""
RECALL_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=?: \n"
"""Recall (surge/llm/agent_tasks.py): facts, filler, tool calls, questions and "S:"."""
