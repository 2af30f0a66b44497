#!/usr/bin/env python3
"""Float64 reference logits of the hybrid Gated DeltaNet models (Qwen3.5 / Qwen3.6 `qwen3_5`, `qwen3_5_moe`, and
Qwen3-Next `qwen3_next`): an implementation of Hugging Face transformers' modeling_qwen3_5.py,
modeling_qwen3_5_moe.py and modeling_qwen3_next.py forward passes written from those semantics in numpy,
everything in float64, independent of kylin's C++ code: zero-centred RMSNorms (1 + w), gated attention (q_proj's
[query | gate] per head, q/k norms, RoPE on the first head_dim * partial_rotary_factor dims, causal GQA, times
sigmoid(gate)), Gated DeltaNet (causal depthwise conv + SiLU, l2-normalised q/k, g = -exp(A_log) softplus(a +
dt_bias), beta = sigmoid(b), the gated delta rule token by token, the gated RMSNorm), SwiGLU MLPs and routed
experts with the gated shared expert.

Checked first against the independent references in tests/data/reference/<model>.json (`--check` prints the
worst relative L2 over their cases):

  /usr/bin/python3 tools/qwen35_reference.py --model tests/data/models/tiny-qwen35 --check
  /usr/bin/python3 tools/qwen35_reference.py --model DIR --length 130 --seed 4 --positions 0,64,129 --greedy 12 --out F.json

Needs Debian's python3-numpy (not needed by the test suite, which reads the JSON it writes).
"""
import argparse
import json
import math
import os
import struct

import numpy as np


def read_safetensors(path, skip=("model.visual.", "mtp.")):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or name.startswith(skip):
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        dtype = info["dtype"]
        if dtype == "BF16":
            values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
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


class Config:
    def __init__(self, model_dir):
        top = json.load(open(os.path.join(model_dir, "config.json")))
        self.model_type = top["model_type"]
        c = top.get("text_config", top) if self.model_type != "qwen3_next" else top
        self.prefix = "model.language_model." if "text_config" in top else "model."
        self.H = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.nh = c["num_attention_heads"]
        self.nkv = c.get("num_key_value_heads", self.nh)
        self.hd = c.get("head_dim", 256)
        self.eps = c.get("rms_norm_eps", 1e-6)
        rope = c.get("rope_parameters") or {}
        self.theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
        factor = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 0.25))
        self.rd = int(self.hd * factor)
        types = c.get("layer_types")
        if types is None:
            interval = c.get("full_attention_interval", 4)
            types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(self.layers)]
        self.types = ["linear_attention" if t in ("linear_attention", "mamba") else "full_attention" for t in types]
        self.K = c.get("linear_conv_kernel_dim", 4)
        self.dk = c.get("linear_key_head_dim", 128)
        self.dv = c.get("linear_value_head_dim", 128)
        self.nk = c.get("linear_num_key_heads", 16)
        self.nv = c.get("linear_num_value_heads", 32)
        self.tied = top.get("tie_word_embeddings", c.get("tie_word_embeddings", False))
        self.moe = "num_experts" in c
        if self.moe:
            self.E = c["num_experts"]
            self.topk = c["num_experts_per_tok"]
            every = self.model_type == "qwen3_5_moe"
            self.norm_topk = True if every else c.get("norm_topk_prob", False)
            self.sparse_step = 1 if every else c.get("decoder_sparse_step", 1)
            self.mlp_only = [] if every else c.get("mlp_only_layers", [])

    def sparse(self, layer):
        return self.moe and layer not in self.mlp_only and (layer + 1) % self.sparse_step == 0


def rms(x, w, eps, one_plus=True):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * ((1.0 + w) if one_plus else w)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)


class Model:
    def __init__(self, model_dir):
        self.c = Config(model_dir)
        self.w = load_weights(model_dir)
        c = self.c
        self.inv_freq = 1.0 / (c.theta ** (np.arange(0, c.rd, 2, dtype=np.float64) / c.rd))

    def t(self, name):
        return self.w[self.c.prefix + name]

    def attention(self, l, x, state):
        c = self.c
        p = f"layers.{l}.self_attn."
        T = x.shape[0]
        qg = (x @ self.t(p + "q_proj.weight").T).reshape(T, c.nh, 2 * c.hd)
        q, gate = qg[:, :, : c.hd], qg[:, :, c.hd :].reshape(T, c.nh * c.hd)
        k = (x @ self.t(p + "k_proj.weight").T).reshape(T, c.nkv, c.hd)
        v = (x @ self.t(p + "v_proj.weight").T).reshape(T, c.nkv, c.hd)
        q = rms(q, self.t(p + "q_norm.weight"), c.eps)
        k = rms(k, self.t(p + "k_norm.weight"), c.eps)
        pos = np.arange(state["pos"], state["pos"] + T, dtype=np.float64)
        ang = pos[:, None] * self.inv_freq[None, :]
        cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
        sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]

        def rot(y):
            r, rest = y[..., : c.rd], y[..., c.rd :]
            half = c.rd // 2
            rh = np.concatenate([-r[..., half:], r[..., :half]], axis=-1)
            return np.concatenate([r * cos + rh * sin, rest], axis=-1)

        q, k = rot(q), rot(k)
        ks = state.setdefault(("k", l), np.zeros((0, c.nkv, c.hd)))
        vs = state.setdefault(("v", l), np.zeros((0, c.nkv, c.hd)))
        ks = state[("k", l)] = np.concatenate([ks, k])
        vs = state[("v", l)] = np.concatenate([vs, v])
        out = np.zeros((T, c.nh, c.hd))
        g = c.nh // c.nkv
        for t in range(T):
            n = state["pos"] + t + 1
            for h in range(c.nh):
                s = ks[:n, h // g, :] @ q[t, h] / math.sqrt(c.hd)
                e = np.exp(s - s.max())
                out[t, h] = (e / e.sum()) @ vs[:n, h // g, :]
        out = out.reshape(T, c.nh * c.hd) * sigmoid(gate)
        return out @ self.t(p + "o_proj.weight").T

    def linear(self, l, x, state):
        c = self.c
        p = f"layers.{l}.linear_attn."
        T = x.shape[0]
        r = c.nv // c.nk
        if c.model_type == "qwen3_next":
            qkvz = (x @ self.t(p + "in_proj_qkvz.weight").T).reshape(T, c.nk, 2 * c.dk + 2 * r * c.dv)
            ba = (x @ self.t(p + "in_proj_ba.weight").T).reshape(T, c.nk, 2 * r)
            q, k = qkvz[..., : c.dk], qkvz[..., c.dk : 2 * c.dk]
            v = qkvz[..., 2 * c.dk : 2 * c.dk + r * c.dv].reshape(T, c.nv * c.dv)
            z = qkvz[..., 2 * c.dk + r * c.dv :].reshape(T, c.nv, c.dv)
            b, a = ba[..., :r].reshape(T, c.nv), ba[..., r:].reshape(T, c.nv)
            mixed = np.concatenate([q.reshape(T, -1), k.reshape(T, -1), v], axis=-1)
        else:
            mixed = x @ self.t(p + "in_proj_qkv.weight").T
            z = (x @ self.t(p + "in_proj_z.weight").T).reshape(T, c.nv, c.dv)
            b = x @ self.t(p + "in_proj_b.weight").T
            a = x @ self.t(p + "in_proj_a.weight").T
        C = mixed.shape[1]
        conv_w = self.t(p + "conv1d.weight").reshape(C, c.K)
        prev = state.get(("conv", l), np.zeros((c.K - 1, C)))
        seq = np.concatenate([prev, mixed])
        state[("conv", l)] = seq[-(c.K - 1) :]
        conv = np.stack([np.sum(conv_w.T * seq[t : t + c.K], axis=0) for t in range(T)])
        conv = silu(conv)
        q = conv[:, : c.nk * c.dk].reshape(T, c.nk, c.dk)
        k = conv[:, c.nk * c.dk : 2 * c.nk * c.dk].reshape(T, c.nk, c.dk)
        v = conv[:, 2 * c.nk * c.dk :].reshape(T, c.nv, c.dv)
        q = l2norm(q) / math.sqrt(c.dk)
        k = l2norm(k)
        beta = sigmoid(b)
        g = -np.exp(self.t(p + "A_log")) * softplus(a + self.t(p + "dt_bias"))
        S = state.get(("S", l), np.zeros((c.nv, c.dk, c.dv)))
        out = np.zeros((T, c.nv, c.dv))
        for t in range(T):
            for h in range(c.nv):
                kh = h // r
                Sh = S[h] * math.exp(g[t, h])
                u = beta[t, h] * (v[t, h] - Sh.T @ k[t, kh])
                Sh = Sh + np.outer(k[t, kh], u)
                S[h] = Sh
                out[t, h] = Sh.T @ q[t, kh]
        state[("S", l)] = S
        out = rms(out, self.t(p + "norm.weight"), c.eps, one_plus=False) * silu(z)
        return out.reshape(T, c.nv * c.dv) @ self.t(p + "out_proj.weight").T

    def mlp(self, l, x):
        c = self.c
        p = f"layers.{l}.mlp."

        def swiglu(pre, y):
            return (silu(y @ self.t(pre + "gate_proj.weight").T) * (y @ self.t(pre + "up_proj.weight").T)) @ self.t(pre + "down_proj.weight").T

        if not c.sparse(l):
            return swiglu(p, x)
        logits = x @ self.t(p + "gate.weight").T
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        out = np.zeros_like(x)
        fused = (self.c.prefix + p + "experts.gate_up_proj") in self.w
        for t in range(x.shape[0]):
            top = np.argsort(-probs[t], kind="stable")[: c.topk]
            wts = probs[t, top] / (probs[t, top].sum() if c.norm_topk else 1.0)
            for e, wt in sorted(zip(top, wts)):
                if fused:
                    gu = self.t(p + "experts.gate_up_proj")[e]
                    M = gu.shape[0] // 2
                    h = silu(gu[:M] @ x[t]) * (gu[M:] @ x[t])
                    out[t] += wt * (self.t(p + "experts.down_proj")[e] @ h)
                else:
                    e_p = p + f"experts.{e}."
                    out[t] += wt * swiglu(e_p, x[t : t + 1])[0]
        shared = swiglu(p + "shared_expert.", x)
        return out + sigmoid(x @ self.t(p + "shared_expert_gate.weight").T) * shared

    def forward(self, tokens, state):
        c = self.c
        x = self.t("embed_tokens.weight")[np.array(tokens)]
        for l in range(c.layers):
            y = rms(x, self.t(f"layers.{l}.input_layernorm.weight"), c.eps)
            x = x + (self.linear(l, y, state) if c.types[l] == "linear_attention" else self.attention(l, y, state))
            x = x + self.mlp(l, rms(x, self.t(f"layers.{l}.post_attention_layernorm.weight"), c.eps))
        state["pos"] += len(tokens)
        h = rms(x, self.t("norm.weight"), c.eps)
        head = self.t("embed_tokens.weight") if c.tied and "lm_head.weight" not in self.w else self.w["lm_head.weight"]
        return h @ head.T


def rel_l2(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.sqrt(np.sum((a - b) ** 2) / np.sum(b * b)))


def positions_of(case, T):
    p = case["positions"]
    return list(range(T)) if p == "all" else [T - 1] if p == "last" else p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--length", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--positions", default="")
    ap.add_argument("--greedy", type=int, default=12)
    ap.add_argument("--out")
    args = ap.parse_args()
    m = Model(args.model)
    name = os.path.basename(os.path.normpath(args.model))
    if args.check:
        ref = json.load(open(os.path.join(os.path.dirname(__file__), "..", "tests", "data", "reference", name + ".json")))
        worst = 0.0
        for case in ref["cases"]:
            logits = m.forward(case["tokens"], {"pos": 0})
            for row, p in zip(case["logits"], positions_of(case, len(case["tokens"]))):
                e = rel_l2(logits[p], row)
                worst = max(worst, e)
                print(f"T={len(case['tokens'])} pos {p}: {e:.3g}")
        print(f"worst relative L2 {worst:.3g}")
        return
    rng = np.random.default_rng(args.seed)
    V = m.t("embed_tokens.weight").shape[0]
    tokens = [int(t) for t in rng.integers(0, V, args.length)]
    positions = [int(p) for p in args.positions.split(",")] if args.positions else [args.length - 1]
    state = {"pos": 0}
    logits = m.forward(tokens, state)
    greedy = []
    nxt = int(np.argmax(logits[-1]))
    for _ in range(args.greedy):
        greedy.append(nxt)
        nxt = int(np.argmax(m.forward([nxt], state)[-1]))
    out = {"reference": "float64 numpy forward (tools/qwen35_reference.py) with HF modeling_qwen3_5 / qwen3_next semantics",
           "cases": [{"tokens": tokens, "positions": positions, "logits": [[float(f"{v:.9g}") for v in logits[p]] for p in positions],
                      "greedy": greedy}]}
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
