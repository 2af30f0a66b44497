#!/usr/bin/env python3
"""Float64 reference logits for long prompts: an implementation of Hugging Face
transformers' modeling_qwen3.py forward pass (embedding, RMSNorm, q/k/v projections, per-head
q/k RMSNorm, rotate_half RoPE with default or YaRN inverse frequencies, causal grouped-query
attention, SwiGLU MLP, final norm, LM head) written from those semantics in numpy, everything in
float64, independent of kylin's C++ code. Dense Qwen3 only.

Checked first against the independent references in tests/data/reference/<model>.json (short
prompts, from ../shared/testdata): `--check` prints the worst relative L2 over their cases.

  /usr/bin/python3 tools/qwen3_reference.py --model tests/data/models/tiny-qwen3-untied --check
  /usr/bin/python3 tools/qwen3_reference.py --model tests/data/models/tiny-qwen3-untied \
      --length 2030 --seed 1 --positions 0,47,48,511,1024,1500,2029 --greedy 12 \
      --out tests/data/reference/tiny-qwen3-untied-long.json
  (tiny-qwen3-yarn: --length 3000 --seed 2 --positions 0,48,1000,2047,2048,2999;
   small-qwen3: --length 2500 --seed 3 --positions 0,48,1200,2499)

Needs Debian's python3-numpy (not needed by the test suite, which reads the JSON it writes).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        dtype = info["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        elif dtype == "F16":
            values = np.frombuffer(raw, dtype="<f2")
        elif dtype == "F32":
            values = np.frombuffer(raw, dtype="<f4")
        else:
            raise SystemExit(f"{name}: dtype {dtype} not handled")
        tensors[name] = values.astype(np.float64).reshape(info["shape"])
    return tensors


def load_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    weights = {}
    for f in files:
        weights.update(read_safetensors(os.path.join(model_dir, f)))
    return weights


def inverse_frequencies(cfg, head_dim):
    """(inv_freq [head_dim/2], attention scaling) as transformers' rope init functions."""
    base = cfg.get("rope_theta", 10000.0)
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return 1.0 / base**exponents, 1.0
    if kind != "yarn":
        raise SystemExit(f"rope_type {kind} not handled")
    factor = scaling["factor"]
    original = scaling.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    beta_fast, beta_slow = scaling.get("beta_fast", 32.0), scaling.get("beta_slow", 1.0)
    attention = scaling.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)

    def correction_dim(rotations):
        return (head_dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), head_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp  # 1: keep the original frequency
    pos_freqs = base**exponents
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, attention


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate(x, cos, sin):  # x [T, heads, d]; cos/sin [T, d/2]
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def forward(cfg, w, tokens):
    """Logits [T, vocab] of the prompt `tokens`, every position."""
    T = len(tokens)
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    inv, att = inverse_frequencies(cfg, d)
    angles = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(angles) * att, np.sin(angles) * att
    x = w["model.embed_tokens.weight"][np.array(tokens)]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, d)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, d)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, d)
        q = rotate(rms_norm(q, w[p + "self_attn.q_norm.weight"], eps), cos, sin)
        k = rotate(rms_norm(k, w[p + "self_attn.k_norm.weight"], eps), cos, sin)
        out = np.empty((T, H, d))
        for head in range(H):
            kv = head // (H // KV)
            scores = q[:, head, :] @ k[:, kv, :].T / math.sqrt(d) + mask
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            out[:, head, :] = (scores / scores.sum(axis=1, keepdims=True)) @ v[:, kv, :]
        x = x + out.reshape(T, H * d) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return x @ head.T


def check(cfg, w, model):
    ref = json.load(open(os.path.join(os.path.dirname(__file__), "..", "tests", "data", "reference", os.path.basename(model) + ".json")))
    worst = 0.0
    for case in ref["cases"]:
        logits = forward(cfg, w, case["tokens"])
        rows = logits if case["positions"] == "all" else logits[-1:]
        for ours, theirs in zip(rows, case["logits"]):
            theirs = np.array(theirs)
            worst = max(worst, np.linalg.norm(ours - theirs) / np.linalg.norm(theirs))
    print(f"{model}: worst relative L2 against the shared references over {len(ref['cases'])} cases: {worst:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--check", action="store_true", help="compare with tests/data/reference/<model>.json")
    ap.add_argument("--length", type=int, help="prompt length (random ids below the vocabulary size)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--positions", help="comma-separated positions whose logits are kept")
    ap.add_argument("--greedy", type=int, default=12, help="argmax continuation length")
    ap.add_argument("--out")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    if cfg["model_type"] != "qwen3":
        raise SystemExit("dense qwen3 only")
    w = load_weights(a.model)
    if a.check:
        check(cfg, w, a.model.rstrip("/"))
        return
    tokens = [int(t) for t in np.random.default_rng(a.seed).integers(0, cfg["vocab_size"], a.length)]
    positions = [int(p) for p in a.positions.split(",")]
    logits = forward(cfg, w, tokens)
    rows = logits[positions]
    greedy, seq = [], list(tokens)
    for _ in range(a.greedy):
        greedy.append(int(np.argmax(logits[-1])))
        seq.append(greedy[-1])
        logits = forward(cfg, w, seq)
    gap = min(float(np.sort(r)[-1] - np.sort(r)[-2]) for r in rows)
    out = {
        "model_config": cfg,
        "reference": "float64 forward with HF modeling_qwen3 semantics over the checkpoint weights (tools/qwen3_reference.py)",
        "cases": [{"tokens": tokens, "positions": positions, "logits": [[float(f"{v:.9g}") for v in r] for r in rows],
                   "greedy": greedy, "min_top2_gap": gap}],
    }
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(f"wrote {a.out}: {len(tokens)} tokens, positions {positions}, greedy {greedy}, smallest top-2 logit gap {gap:.3g}")


if __name__ == "__main__":
    sys.exit(main())
