"""A lean forward pass of Llama-family models, on the Hugging Face model's own parameters.

At the sizes that train on a CPU (about 1M parameters), the transformers forward spends most of
its time in Python and dispatch, not arithmetic (../shared/reference/llmrl.md 8.6). This
module computes the same function with fewer, larger operations: one fused q/k/v matmul per
layer, rotary tables computed once, `scaled_dot_product_attention`, and a KV cache whose rows
are generation slots (surge/llm/engine.py). It holds no weights of its own: it reads the
`LlamaForCausalLM` (or Qwen2 / Mistral) module's tensors, so training it trains that model,
and `save_pretrained` writes what was trained. A layer with LoRA adapters (surge/llm/lora.py)
is applied as its merged weight, W + (alpha / r) B A. tests/unit/test_llm_engine.py pins its logits
to the transformers forward.

It computes on the device of the model's weights (a CUDA device where `rollout.device` or
`workers.trainer_device` put the model): every tensor it makes, the rotary tables and the
cache included, is made there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from surge.llm.lora import merged_weight, uses_dropout

SUPPORTED = ("llama", "mistral", "qwen2")


@dataclass
class KVCache:
    """Keys and values per layer, `[slots, kv_heads, max_length, head_dim]`."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]


Linear = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Projections:
    """One decoder layer's linear maps as the forward applies them (q, k and v as one)."""

    qkv: Linear
    o: Linear
    gate: Linear
    up: Linear
    down: Linear


class LeanLlama:
    def __init__(self, model: Any) -> None:
        config = model.config
        if config.model_type not in SUPPORTED:
            raise ValueError(
                f"model_type {config.model_type!r}: the built-in engine runs {SUPPORTED}"
            )
        rope = getattr(config, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope_type {rope['rope_type']!r}: the built-in engine runs 'default'")
        self.model = model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.max_length = config.max_position_embeddings
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        freqs = torch.outer(torch.arange(self.max_length).float(), inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        inner = model.model
        self.device = inner.embed_tokens.weight.device
        self.cos, self.sin = emb.cos().to(self.device), emb.sin().to(self.device)  # [L, D]
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.layers = inner.layers
        self.dropout = uses_dropout(model)
        self.projections: list[Projections] = []
        self.lm_head: Linear = model.lm_head
        self.refresh()

    def refresh(self) -> None:
        """Rebuild the weights each linear map applies from the model's: q, k and v fused,
        adapters merged (after the weights changed, and on every training forward, where
        they must stay in the autograd graph). In training with LoRA dropout, the adapted
        layers' own forwards instead (dropout acts on their input)."""
        own = self.dropout and self.model.training
        self.projections = [
            _own_forwards(layer) if own else _merged(layer) for layer in self.layers
        ]
        head = self.model.lm_head
        self.lm_head = head if own else _applied(*merged_weight(head))

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def _qkv(
        self, i: int, h: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q `[B, heads, T, D]`, k and v `[B, kv_heads, T, D]` of layer i, rotated."""
        B, T, _ = h.shape
        qkv = self.projections[i].qkv(h)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin), v

    def _finish_layer(self, i: int, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        B, _, T, _ = attn.shape
        p = self.projections[i]
        attn = attn.transpose(1, 2).reshape(B, T, self.heads * self.head_dim)
        x = x + p.o(attn)
        h = self._rms(x, self.layers[i].post_attention_layernorm.weight)
        return x + p.down(F.silu(p.gate(h)) * p.up(h))

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self._rms(x, self.norm))

    def _gqa(self) -> bool:
        return self.kv_heads != self.heads

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits `[B, T, vocab]` of right-padded sequences `[B, T]` (causal attention only:
        a real token never attends to padding that follows it)."""
        self.refresh()
        T = tokens.shape[1]
        positions = torch.arange(T, device=self.device).expand(tokens.shape[0], T)
        x = F.embedding(tokens, self.embed)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(i, self._rms(x, layer.input_layernorm.weight), positions)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self._gqa())
            x = self._finish_layer(i, x, attn)
        return self._logits(x)

    def forward_groups(
        self,
        prompts: torch.Tensor,
        prompt_lens: torch.Tensor,
        completions: torch.Tensor,
        counts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits predicting each completion token, `[S, N, vocab]` (entry j predicts
        completion token j), for `completions [S, N]` of `prompts [P_groups, P]` (right-padded,
        real lengths `prompt_lens`), S = P_groups x G with each prompt's G completions
        contiguous (GRPO's groups).

        The same function as the forward of every prompt + completion sequence, computed
        with each prompt once per group instead of G times: layer by layer, the prompt's keys
        and values are shared by its completions. For short completions after a shared
        prompt (arithmetic: 7 prompt tokens, 4 completion tokens, G = 8) it is about half the
        work, and the gradient is exact. `counts` [P_groups]: completions per prompt where
        they differ (a multi-turn batch without its empty segments); default S / P_groups."""
        self.refresh()
        groups, P = prompts.shape
        S, N = completions.shape
        G: int | torch.Tensor = S // groups if counts is None else counts
        lens = prompt_lens.repeat_interleave(G)
        x_p = F.embedding(prompts, self.embed)
        x_c = F.embedding(completions, self.embed)
        device = self.device
        pos_p = torch.arange(P, device=device).expand(groups, P)
        # N is the batch's longest completion, so a row with a longer prompt than that one's
        # runs padding past its own end, possibly past the model's positions: padding sits
        # at the last position instead (no real token attends to it; its logits are unused).
        pos_c = (lens[:, None] + torch.arange(N, device=device)).clamp(max=self.max_length - 1)
        # A completion token sees its prompt's real tokens and the completion up to itself.
        sees_prompt = (torch.arange(P, device=device)[None, :] < lens[:, None])[:, None, :]
        sees_prompt = sees_prompt.expand(S, N, P)
        causal = torch.ones(N, N, dtype=torch.bool, device=device).tril().expand(S, N, N)
        mask = torch.cat([sees_prompt, causal], dim=2)[:, None]  # [S, 1, N, P + N]
        gqa = self._gqa()
        for i, layer in enumerate(self.layers):
            norm = layer.input_layernorm.weight
            q_p, k_p, v_p = self._qkv(i, self._rms(x_p, norm), pos_p)
            q_c, k_c, v_c = self._qkv(i, self._rms(x_c, norm), pos_c)
            keys = torch.cat([k_p.repeat_interleave(G, dim=0), k_c], dim=2)
            values = torch.cat([v_p.repeat_interleave(G, dim=0), v_c], dim=2)
            attn_p = F.scaled_dot_product_attention(q_p, k_p, v_p, is_causal=True, enable_gqa=gqa)
            attn_c = F.scaled_dot_product_attention(
                q_c, keys, values, attn_mask=mask, enable_gqa=gqa
            )
            x_p = self._finish_layer(i, x_p, attn_p)
            x_c = self._finish_layer(i, x_c, attn_c)
        last = x_p[torch.arange(groups, device=device), prompt_lens - 1]
        last_prompt = last.repeat_interleave(G, dim=0)
        hidden = torch.cat([last_prompt[:, None], x_c[:, :-1]], dim=1)  # [S, N, H]
        return self._logits(hidden)

    # ------------------------------------------------------------------ generation with a cache

    def new_cache(self, slots: int, length: int) -> KVCache:
        """Room for `slots` sequences of up to `length` tokens (prompt and completion)."""
        if length > self.max_length:
            raise ValueError(
                f"sequences of {length} tokens: the model has {self.max_length} positions "
                "(max_position_embeddings)"
            )
        shape = (slots, self.kv_heads, length, self.head_dim)
        n = len(self.layers)
        like = {"dtype": self.embed.dtype, "device": self.device}
        return KVCache(
            [torch.zeros(shape, **like) for _ in range(n)],  # type: ignore[arg-type]
            [torch.zeros(shape, **like) for _ in range(n)],  # type: ignore[arg-type]
        )

    def prefill(
        self, cache: KVCache, slots: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor
    ) -> torch.Tensor:
        """Run right-padded prefixes `tokens [J, P]` (real lengths `lengths`) from position 0
        into cache rows `slots`; the logits after each prefix's last token, `[J, vocab]`."""
        J, P = tokens.shape
        positions = torch.arange(P, device=self.device).expand(J, P)
        x = F.embedding(tokens, self.embed)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(i, self._rms(x, layer.input_layernorm.weight), positions)
            cache.keys[i][slots, :, :P] = k
            cache.values[i][slots, :, :P] = v
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self._gqa())
            x = self._finish_layer(i, x, attn)
        last = x[torch.arange(J, device=self.device), lengths - 1]
        return self._logits(last)

    def extend(
        self,
        cache: KVCache,
        slots: torch.Tensor,
        tokens: torch.Tensor,
        starts: torch.Tensor,
        lengths: torch.Tensor,
    ) -> torch.Tensor:
        """Run right-padded continuations `tokens [J, T]` (real lengths `lengths`) into cache
        rows `slots`, row j from position `starts[j]` on, attending to what the row holds
        before it (a prompt prefilled once for its group, or a finished turn of a multi-turn
        episode); the logits after each row's last real token, `[J, vocab]`. Padding runs at
        the cache's last position, which generation never reaches (a sequence's last sampled
        token is never run), so rows of very different lengths fit the cache together."""
        J, T = tokens.shape
        length = cache.keys[0].shape[2]
        steps = torch.arange(T, device=self.device)
        real = steps < lengths[:, None]
        positions = torch.where(real, starts[:, None] + steps, length - 1)  # [J, T]
        span = torch.arange(length, device=self.device)
        visible = (span <= positions[:, :, None]).unsqueeze(1)  # [J, 1, T, L]
        rows = slots[:, None]
        x = F.embedding(tokens, self.embed)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(i, self._rms(x, layer.input_layernorm.weight), positions)
            keys, values = cache.keys[i], cache.values[i]
            keys[rows, :, positions] = k.transpose(1, 2)  # [J, T, kv_heads, D]
            values[rows, :, positions] = v.transpose(1, 2)
            attn = F.scaled_dot_product_attention(
                q, keys[slots], values[slots], attn_mask=visible, enable_gqa=self._gqa()
            )
            x = self._finish_layer(i, x, attn)
        return self._logits(x[torch.arange(J, device=self.device), lengths - 1])

    def decode(self, cache: KVCache, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token for every cache row (`tokens [S]` at `positions [S]`, each row at its own
        place; idle rows compute and are ignored, cheaper than gathering the busy ones);
        appends to the cache and returns the next-token logits `[S, vocab]`."""
        S = tokens.shape[0]
        length = cache.keys[0].shape[2]
        x = F.embedding(tokens, self.embed).unsqueeze(1)  # [S, 1, hidden]
        span = torch.arange(length, device=self.device)
        visible = (span <= positions[:, None]).view(S, 1, 1, length)
        pos = positions.unsqueeze(1)
        rows = torch.arange(S, device=self.device)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(i, self._rms(x, layer.input_layernorm.weight), pos)
            keys, values = cache.keys[i], cache.values[i]
            keys[rows, :, positions] = k[:, :, 0]
            values[rows, :, positions] = v[:, :, 0]
            attn = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=visible, enable_gqa=self._gqa()
            )
            x = self._finish_layer(i, x, attn)
        return self._logits(x[:, 0])


def _applied(weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
    return lambda x: F.linear(x, weight, bias)


def _merged(layer: Any) -> Projections:
    """A layer's maps as single weights: q, k and v in one matmul, adapters merged."""
    a, m = layer.self_attn, layer.mlp
    qkv = [merged_weight(p) for p in (a.q_proj, a.k_proj, a.v_proj)]
    biases = [b for _, b in qkv if b is not None]  # Qwen2's q, k and v have biases
    return Projections(
        _applied(torch.cat([w for w, _ in qkv]), torch.cat(biases) if biases else None),
        *(_applied(*merged_weight(p)) for p in (a.o_proj, m.gate_proj, m.up_proj, m.down_proj)),
    )


def _own_forwards(layer: Any) -> Projections:
    """A layer's maps as its modules' forwards (q, k and v each its own)."""
    a, m = layer.self_attn, layer.mlp
    return Projections(
        lambda h: torch.cat([a.q_proj(h), a.k_proj(h), a.v_proj(h)], dim=-1),
        a.o_proj, m.gate_proj, m.up_proj, m.down_proj,
    )  # fmt: skip
