"""A pure-torch forward of Hugging Face Llama and Qwen2 causal LMs (the float64 reference).

:class:`TinyCausalLM` reads a ``config.json`` and a state dict in Hugging Face naming and
computes the logits exactly as ``transformers``' ``LlamaForCausalLM`` / ``Qwen2ForCausalLM``
do (eager attention), in float64 by default, with the call interface of
:class:`~specexact.decoders.ToyLM`: ``model(input_ids [B, T], positions [B, P] | None) ->
logits [B, P, V]``. The decoders (:func:`~specexact.decoders.speculative_generate`,
:func:`~specexact.decoders.naive_generate`) and the enumerations of
:mod:`specexact.exactness.enumeration` run on it unchanged.

What is implemented: token embedding; per layer RMSNorm, grouped-query self-attention
(``num_key_value_heads``) with rotary position embeddings (the default rope of
``rope_theta``; any ``rope_scaling`` is refused), a causal mask, the output projection and
a residual, RMSNorm, the SiLU-gated MLP and a residual; a final RMSNorm and the LM head
(tied to the embedding when ``tie_word_embeddings``). Qwen2 is Llama with biases on the
q/k/v projections; Llama's ``attention_bias`` (q/k/v/o biases) and ``mlp_bias`` are read
too. Anything else in a config that changes the forward (another activation, sliding
windows in use, rope scaling) raises ``ValueError`` naming the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .kv_cache import PrefixKVCache

__all__ = ["ARCHITECTURES", "TinyConfig", "TinyCausalLM", "load_model", "parameter_names"]

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
"""Supported ``model_type`` values and their Hugging Face class names."""


@dataclass(frozen=True)
class TinyConfig:
    """The fields of a Hugging Face Llama / Qwen2 ``config.json`` the forward reads.

    Parameters
    ----------
    model_type : {"llama", "qwen2"}
    vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads : int
    num_key_value_heads : int
        Divides ``num_attention_heads`` (grouped-query attention).
    head_dim : int
        Width of one head (``hidden_size // num_attention_heads`` when a config omits it).
    rms_norm_eps : float
    rope_theta : float
    tie_word_embeddings : bool
        The LM head is the embedding matrix (no ``lm_head.weight`` in the state dict).
    attention_bias : bool
        Biases on q/k/v/o (Llama); Qwen2 always has q/k/v biases and no o bias.
    mlp_bias : bool
        Biases on the gate / up / down projections (Llama).
    eos_token_id, bos_token_id : int or None
    max_position_embeddings : int

    Raises
    ------
    ValueError
        A size below 1, heads that do not divide, an unknown ``model_type``.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    eos_token_id: int | None = None
    bos_token_id: int | None = None
    max_position_embeddings: int = 64

    def __post_init__(self) -> None:
        if self.model_type not in ARCHITECTURES:
            raise ValueError(f"model_type must be one of {sorted(ARCHITECTURES)}, got {self.model_type!r}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_key_value_heads={self.num_key_value_heads} must divide "
                             f"num_attention_heads={self.num_attention_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even (rotary embedding), got {self.head_dim}")
        if not (self.rms_norm_eps > 0 and math.isfinite(self.rms_norm_eps)):
            raise ValueError(f"rms_norm_eps must be finite and > 0, got {self.rms_norm_eps!r}")
        if not (self.rope_theta > 0 and math.isfinite(self.rope_theta)):
            raise ValueError(f"rope_theta must be finite and > 0, got {self.rope_theta!r}")
        if self.eos_token_id is not None and not 0 <= self.eos_token_id < self.vocab_size:
            raise ValueError(f"eos_token_id must be in [0, {self.vocab_size}) or None, got {self.eos_token_id!r}")

    @property
    def q_bias(self) -> bool:
        """Whether q/k/v have biases."""
        return self.model_type == "qwen2" or self.attention_bias

    @property
    def o_bias(self) -> bool:
        """Whether the output projection has a bias."""
        return self.model_type == "llama" and self.attention_bias

    @classmethod
    def from_hf(cls, d: dict) -> "TinyConfig":
        """The config of a Hugging Face ``config.json`` dict.

        Raises
        ------
        ValueError
            An unsupported ``model_type``, ``hidden_act`` other than ``"silu"``, a
            ``rope_scaling`` (or ``rope_parameters`` whose ``rope_type`` is not
            ``"default"``), a sliding window in use, ``pretraining_tp`` other than 1, or
            an ``eos_token_id`` list of more than one id; the message names the field.
        """
        model_type = d.get("model_type")
        if model_type not in ARCHITECTURES:
            raise ValueError(f"config.json: model_type must be one of {sorted(ARCHITECTURES)}, got {model_type!r}")
        act = d.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"config.json: hidden_act={act!r} is not supported (only 'silu')")
        if d.get("rope_scaling"):
            raise ValueError(f"config.json: rope_scaling={d['rope_scaling']!r} is not supported (default rope only)")
        rope_theta = d.get("rope_theta")
        rope_params = d.get("rope_parameters")
        if rope_params:  # transformers >= 5 writes the rope settings here
            rope_type = rope_params.get("rope_type", rope_params.get("type", "default"))
            if rope_type != "default":
                raise ValueError(f"config.json: rope_parameters={rope_params!r} is not supported (default rope only)")
            rope_theta = rope_params.get("rope_theta", rope_theta)
        if d.get("use_sliding_window"):
            raise ValueError("config.json: use_sliding_window=True is not supported")
        if d.get("pretraining_tp", 1) != 1:
            raise ValueError(f"config.json: pretraining_tp={d['pretraining_tp']!r} is not supported (only 1)")
        eos = d.get("eos_token_id")
        if isinstance(eos, list):
            if len(eos) > 1:
                raise ValueError(f"config.json: eos_token_id={eos!r}: one EOS id only")
            eos = eos[0] if eos else None
        heads = d["num_attention_heads"]
        return cls(
            model_type=model_type,
            vocab_size=d["vocab_size"],
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads") or heads,
            head_dim=d.get("head_dim") or d["hidden_size"] // heads,
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            rope_theta=float(10000.0 if rope_theta is None else rope_theta),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            attention_bias=bool(d.get("attention_bias", False)) if model_type == "llama" else False,
            mlp_bias=bool(d.get("mlp_bias", False)) if model_type == "llama" else False,
            eos_token_id=eos,
            bos_token_id=d.get("bos_token_id"),
            max_position_embeddings=d.get("max_position_embeddings", 64),
        )

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


def parameter_names(config: TinyConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of the state dict, in Hugging Face naming, with its shape, in the fixed
    order :mod:`~specexact.decoders.tiny_models.make` draws them: the embedding; per layer
    the input norm, q / k / v / o (each weight then its bias), the post-attention norm,
    gate / up / down; the final norm; the LM head (absent when tied)."""
    c = config
    D, H, K, hd, I = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.intermediate_size
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (c.vocab_size, D))]
    for n in range(c.num_hidden_layers):
        p = f"model.layers.{n}."
        out.append((p + "input_layernorm.weight", (D,)))
        for proj, rows in (("q_proj", H * hd), ("k_proj", K * hd), ("v_proj", K * hd)):
            out.append((p + f"self_attn.{proj}.weight", (rows, D)))
            if c.q_bias:
                out.append((p + f"self_attn.{proj}.bias", (rows,)))
        out.append((p + "self_attn.o_proj.weight", (D, H * hd)))
        if c.o_bias:
            out.append((p + "self_attn.o_proj.bias", (D,)))
        out.append((p + "post_attention_layernorm.weight", (D,)))
        for proj, shape in (("gate_proj", (I, D)), ("up_proj", (I, D)), ("down_proj", (D, I))):
            out.append((p + f"mlp.{proj}.weight", shape))
            if c.mlp_bias:
                out.append((p + f"mlp.{proj}.bias", shape[:1]))
    out.append(("model.norm.weight", (D,)))
    if not c.tie_word_embeddings:
        out.append(("lm_head.weight", (c.vocab_size, D)))
    return out


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


class TinyCausalLM:
    """A Llama / Qwen2 causal LM computed in plain torch, with :class:`~specexact.decoders.ToyLM`'s
    call interface.

    Shape: ``input_ids [B, T] -> logits [B, n, V]`` at ``n`` requested positions.

    Parameters
    ----------
    config : TinyConfig
    state_dict : dict of str to torch.Tensor
        Hugging Face names (:func:`parameter_names`), any floating dtype; kept on CPU as
        given (the canonical copy) and converted to ``device`` / ``dtype`` for the forward.
    device : torch.device or str, optional
        Default CPU.
    dtype : torch.dtype
        float64 (default: the reference) or float32.
    kv_cache : bool
        Keep each call's keys and values and resume the next call from them
        (:class:`~specexact.decoders.tiny_models.kv_cache.PrefixKVCache`, in
        :attr:`kv_cache`): the same logits up to rounding, for the new columns' cost. Off by
        default (every call computes every column).

    Raises
    ------
    ValueError
        A tensor missing from ``state_dict``, an unexpected one, or one of the wrong shape
        (named).
    """

    max_elements: int = 1 << 23
    """Largest intermediate tensor of one forward, in elements: a larger batch is computed
    in chunks of rows (a row's result does not depend on the rows beside it beyond
    rounding)."""

    def __init__(self, config: TinyConfig, state_dict: dict[str, torch.Tensor], *,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float64,
                 kv_cache: bool = False) -> None:
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating dtype, got {dtype}")
        expected = dict(parameter_names(config))
        if config.tie_word_embeddings and "lm_head.weight" in state_dict:  # some writers keep the tied copy
            state_dict = {k: v for k, v in state_dict.items() if k != "lm_head.weight"}
        missing = [k for k in expected if k not in state_dict]
        unexpected = sorted(k for k in state_dict if k not in expected)
        if missing or unexpected:
            raise ValueError(f"state dict does not fit the config: missing {missing[:5]}, unexpected {unexpected[:5]}")
        for name, shape in expected.items():
            if tuple(state_dict[name].shape) != shape:
                raise ValueError(f"state dict: {name} has shape {tuple(state_dict[name].shape)}, expected {shape}")
        self.config = config
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self._state = dict(state_dict)  # canonical copy, as given
        self.w = {k: v.to(self.device, dtype) for k, v in state_dict.items()}
        self.kv_cache = PrefixKVCache() if kv_cache else None
        hd = config.head_dim
        self._inv_freq = 1.0 / (config.rope_theta ** (
            torch.arange(0, hd, 2, dtype=torch.int64).to(device=self.device, dtype=torch.float64) / hd))

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def eos_token_id(self) -> int | None:
        return self.config.eos_token_id

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The canonical weights (as loaded)."""
        return dict(self._state)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "TinyCausalLM":
        """A copy on another device and / or dtype (the same canonical weights; a fresh
        cache where this one has one)."""
        return TinyCausalLM(self.config, self._state, device=device or self.device, dtype=dtype or self.dtype,
                            kv_cache=self.kv_cache is not None)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        out = x @ self.w[name + ".weight"].T
        bias = self.w.get(name + ".bias")
        return out if bias is None else out + bias

    def _rms_norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return self.w[name] * (x * torch.rsqrt(var + self.config.rms_norm_eps))

    def hidden_states(self, input_ids: torch.Tensor, ends: torch.Tensor | None = None) -> torch.Tensor:
        """The final-norm hidden state after every prefix. Shape: ``[B, T] -> [B, T, D]``.

        ``-1`` ids (right padding) are read as token 0: causal attention keeps every
        position before the padding unaffected. With :attr:`kv_cache`, the columns the last
        call shares are resumed from it, and with ``ends [B]`` row ``i``'s columns from
        ``ends[i]`` on may be left uncomputed (meaningless).

        Raises
        ------
        ValueError
            ``input_ids`` not ``[B, T]`` with ``T >= 1``, an id ``>= vocab_size`` or
            ``< -1``.
        """
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError(f"input_ids must have shape [B, T] with T >= 1, got {tuple(input_ids.shape)}")
        if input_ids.numel() and (int(input_ids.max()) >= self.vocab_size or int(input_ids.min()) < -1):
            raise ValueError(f"input_ids must lie in [0, vocab_size={self.vocab_size}) (-1 for padding), got "
                             f"[{int(input_ids.min())}, {int(input_ids.max())}]")
        ids = input_ids.to(self.device).clamp_min(0)
        if self.kv_cache is not None:
            return self.kv_cache.hidden_states(self, ids, ends)
        B, T = ids.shape
        rows = self.rows_per_forward(T, T)
        if B > rows:
            return torch.cat([self.forward_columns(ids[i:i + rows])[0] for i in range(0, B, rows)])
        return self.forward_columns(ids)[0]

    def rows_per_forward(self, new: int, total: int) -> int:
        """Rows computed together when ``new`` of ``total`` columns are computed, so that no
        intermediate tensor exceeds :attr:`max_elements` (at least 1)."""
        c, H = self.config, self.config.num_attention_heads
        return max(1, self.max_elements // max(new * c.intermediate_size, H * new * total, H * total * c.head_dim,
                                               total * c.hidden_size))

    def forward_columns(self, ids: torch.Tensor, columns: torch.Tensor | None = None, past: list | None = None
                        ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The final-norm hidden states of some columns of every row, given the keys and
        values of the columns before them. Shape: ``ids [B, n]`` (clamped ids on the model's device) at ``columns [B, n]``
        (consecutive in a row), ``past`` per layer ``(keys, values)`` each ``[B, K, S, hd]``
        (rotated keys) holding every column before a row's first one, ``S > columns.max()``
        -> ``hidden [B, n, D]`` and per layer ``(keys, values) [B, K, S, hd]``: ``past`` with
        the new columns written in (a copy). Where every row's columns start at the same
        ``s``, ``past`` may hold the ``s`` columns before them only (``S = s``; the result's
        keys and values then have ``s + n`` columns). Without ``columns`` (and ``past``):
        columns ``0..n-1`` of every row, the whole forward, keys and values ``[B, K, n, hd]``.
        """
        c = self.config
        B, n_new = ids.shape
        H, K, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        x = self.w["model.embed_tokens.weight"][ids]  # [B, n, D]
        at = torch.arange(n_new, device=self.device) if columns is None else columns  # [n] or [B, n]
        freqs = at.to(torch.float64)[..., None] * self._inv_freq  # [(B,) n, hd/2]
        emb = torch.cat([freqs, freqs], -1)
        cos, sin = emb.cos().to(self.dtype), emb.sin().to(self.dtype)  # [n, hd] or [B, n, hd]
        if columns is None:
            causal = torch.ones(n_new, n_new, dtype=torch.bool, device=self.device).tril()  # [n, n]
        else:
            cos, sin = cos[:, None], sin[:, None]  # [B, 1, n, hd]
            S = past[0][0].shape[2]
            prefix = S <= int(columns[0, 0])  # past holds the columns before a common start
            S = S + n_new if prefix else S
            causal = (torch.arange(S, device=self.device) <= columns[:, :, None])[:, None]  # [B, 1, n, S]
            where = columns[:, None, :, None].expand(B, K, n_new, hd)
        kv = []
        for n in range(c.num_hidden_layers):
            p = f"model.layers.{n}."
            h = self._rms_norm(x, p + "input_layernorm.weight")
            q = self._linear(h, p + "self_attn.q_proj").view(B, n_new, H, hd).transpose(1, 2)  # [B, H, n, hd]
            k = self._linear(h, p + "self_attn.k_proj").view(B, n_new, K, hd).transpose(1, 2)  # [B, K, n, hd]
            v = self._linear(h, p + "self_attn.v_proj").view(B, n_new, K, hd).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            if columns is not None and prefix:  # after the earlier columns: [B, K, S, hd]
                k, v = torch.cat([past[n][0], k], 2), torch.cat([past[n][1], v], 2)
            elif columns is not None:  # written among the earlier ones
                k, v = past[n][0].scatter(2, where, k), past[n][1].scatter(2, where, v)
            kv.append((k, v))
            k = k.repeat_interleave(H // K, dim=1)  # [B, H, S, hd]
            v = v.repeat_interleave(H // K, dim=1)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)  # [B, H, n, S]
            scores = scores.masked_fill(~causal, -torch.inf)
            attn = torch.softmax(scores, dim=-1) @ v  # [B, H, n, hd]
            x = x + self._linear(attn.transpose(1, 2).reshape(B, n_new, H * hd), p + "self_attn.o_proj")
            h = self._rms_norm(x, p + "post_attention_layernorm.weight")
            gate = self._linear(h, p + "mlp.gate_proj")
            x = x + self._linear(torch.nn.functional.silu(gate) * self._linear(h, p + "mlp.up_proj"),
                                 p + "mlp.down_proj")
        return self._rms_norm(x, "model.norm.weight"), kv

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Next-token logits after the prefixes ending at ``positions``.

        Shape: ``input_ids [B, T], positions [B, n] -> logits [B, n, V]`` (model dtype).

        Parameters
        ----------
        input_ids : torch.LongTensor
            Shape ``[B, T]``, ``T >= 1``; ids in ``[0, V)``, ``-1`` for right padding.
        positions : torch.LongTensor, optional
            Shape ``[B, n]``; index ``t`` asks for the law of the token after
            ``input_ids[:, :t + 1]``. Default: every position (``n = T``).

        Raises
        ------
        ValueError
            A malformed ``input_ids`` (see :meth:`hidden_states`) or positions outside
            ``[0, T)``.
        """
        T = input_ids.shape[1] if input_ids.dim() == 2 else 0
        if positions is not None:
            positions = positions.to(self.device)
            if positions.dim() != 2 or positions.shape[0] != input_ids.shape[0]:
                raise ValueError(f"positions must have shape [{input_ids.shape[0]}, n], got {tuple(positions.shape)}")
            if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= T):
                raise ValueError(f"positions must lie in [0, {T}), got [{int(positions.min())}, "
                                 f"{int(positions.max())}]")
        ends = None
        if positions is not None and positions.numel():
            # attention is causal: the columns after the last wanted one (of a row) are not needed
            ends = positions.max(1).values + 1  # [B]
            input_ids = input_ids[:, : int(ends.max())]
        h = self.hidden_states(input_ids, ends)  # [B, T', D]
        if positions is not None:
            h = h.gather(1, positions[:, :, None].expand(-1, -1, h.shape[-1]))  # [B, n, D]
        head = self.w["model.embed_tokens.weight" if self.config.tie_word_embeddings else "lm_head.weight"]
        return h @ head.T


def load_model(directory: str | Path, *, device: torch.device | str | None = None,
               dtype: torch.dtype = torch.float64, kv_cache: bool = False) -> TinyCausalLM:
    """A :class:`TinyCausalLM` from a Hugging Face model folder (``config.json`` +
    ``model.safetensors``).

    Parameters
    ----------
    directory : str or Path
    device : torch.device or str, optional
    dtype : torch.dtype
        float64 by default (the reference).
    kv_cache : bool
        Resume each call from the last one's keys and values (:class:`TinyCausalLM`).

    Raises
    ------
    FileNotFoundError
        ``config.json`` or ``model.safetensors`` missing.
    ValueError
        A config the forward does not support, or weights that do not fit it (named).
    """
    from safetensors.torch import load_file

    directory = Path(directory)
    for name in ("config.json", "model.safetensors"):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{directory / name} not found (a model folder holds config.json and "
                                    "model.safetensors)")
    config = TinyConfig.from_hf(json.loads((directory / "config.json").read_text()))
    state = load_file(str(directory / "model.safetensors"))
    return TinyCausalLM(config, state, device=device, dtype=dtype, kv_cache=kv_cache)
