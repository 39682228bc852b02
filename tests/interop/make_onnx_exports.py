"""
Writes the ONNX files of tests/interop/onnx_exports/ with PyTorch's own exporters (run by
hand where torch is installed; the files are committed, so CI needs no torch):

    python tests/interop/make_onnx_exports.py tests/interop/onnx_exports

Three small models with random weights, as users export them: a ResNet (Conv, BatchNorm
folded by the exporter, MaxPool, residual Add, global pooling, Linear), a BERT-style encoder
(embeddings, LayerNorm, attention with an additive padding mask, GELU) and a GPT-2-style
decoder (fused QKV split, causal mask from a registered buffer, tanh GELU with Pow, tied LM
head), each through the TorchScript exporter (opset 17, dynamic_axes) and the dynamo
exporter (torch.export, dynamic batch); every file has a dynamic batch dimension. A
Llama-style decoder of nn.RMSNorm and scaled_dot_product_attention (grouped queries) exported
at opset 23, where they become ONNX's RMSNormalization and Attention ops.
With transformers installed, also Hugging Face's own BertModel (TorchScript exporter),
GPT2LMHeadModel and LlamaForCausalLM (dynamo exporter; the Llama also at opset 23) at tiny
random configurations (hf-*.onnx), as users export them. test_onnx_exports.py runs them against onnxruntime.
"""

import math
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + x)


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 7, stride=2, padding=3)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.l1 = Block(8)
        self.down = nn.Conv2d(8, 16, 1, stride=2)
        self.l2 = Block(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.stem(x))))
        x = self.l2(self.down(self.l1(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Bert(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=2, positions=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(positions, d)
        self.ln = nn.LayerNorm(d)
        self.heads = heads
        self.layers = nn.ModuleList([nn.ModuleDict(dict(
            q=nn.Linear(d, d), k=nn.Linear(d, d), v=nn.Linear(d, d), o=nn.Linear(d, d),
            ln1=nn.LayerNorm(d), f1=nn.Linear(d, 4 * d), f2=nn.Linear(4 * d, d),
            ln2=nn.LayerNorm(d))) for _ in range(layers)])

    def forward(self, ids, mask):
        b, s = ids.shape
        pos = torch.arange(s).unsqueeze(0).expand(b, s)
        x = self.ln(self.emb(ids) + self.pos(pos))
        m = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            d = x.shape[-1]
            hd = d // self.heads

            def heads(t):
                return t.view(b, s, self.heads, hd).transpose(1, 2)
            q, k, v = heads(layer.q(x)), heads(layer.k(x)), heads(layer.v(x))
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + m, -1) @ v
            x = layer.ln1(x + layer.o(a.transpose(1, 2).reshape(b, s, d)))
            x = layer.ln2(x + layer.f2(F.gelu(layer.f1(x))))
        return x


class GPT2(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=2, positions=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(positions, d)
        self.heads = heads
        self.register_buffer("bias", torch.tril(torch.ones(positions, positions,
                                                           dtype=torch.bool))
                             .view(1, 1, positions, positions))
        self.blocks = nn.ModuleList([nn.ModuleDict(dict(
            ln1=nn.LayerNorm(d), attn=nn.Linear(d, 3 * d), proj=nn.Linear(d, d),
            ln2=nn.LayerNorm(d), fc=nn.Linear(d, 4 * d), fc2=nn.Linear(4 * d, d)))
            for _ in range(layers)])
        self.lnf = nn.LayerNorm(d)

    def forward(self, ids):
        b, s = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(s))
        for blk in self.blocks:
            d = x.shape[-1]
            hd = d // self.heads
            q, k, v = blk.attn(blk.ln1(x)).split(d, dim=2)
            q, k, v = (t.view(b, s, self.heads, hd).transpose(1, 2) for t in (q, k, v))
            w = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            w = torch.where(self.bias[:, :, :s, :s], w, torch.tensor(torch.finfo(w.dtype).min))
            a = torch.softmax(w, -1) @ v
            x = x + blk.proj(a.transpose(1, 2).reshape(b, s, d))
            h = blk.fc(blk.ln2(x))
            h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                            (h + 0.044715 * torch.pow(h, 3.0))))
            x = x + blk.fc2(h)
        return self.lnf(x) @ self.wte.weight.t()


def export(model, args, names, path, dynamo, opset=None):
    model.eval()
    if dynamo:
        batch = torch.export.Dim("batch", min=1, max=64)
        torch.onnx.export(model, args, str(path), input_names=names, output_names=["y"],
                          dynamo=True, dynamic_shapes={n: {0: batch} for n in names},
                          opset_version=opset)
    else:
        torch.onnx.export(model, args, str(path), input_names=names, output_names=["y"],
                          dynamo=False, opset_version=17,
                          dynamic_axes={n: {0: "batch"} for n in names + ["y"]})


class HFWrapper(nn.Module):
    """A transformers model called as exporters call it: tensors in, one tensor out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None):
        kw = {"input_ids": input_ids, "use_cache": False, "return_dict": True}
        if attention_mask is not None:
            kw["attention_mask"] = attention_mask
        o = self.model(**kw)
        return o.logits if hasattr(o, "logits") else o.last_hidden_state


def export_hf(out, ids, mask):
    try:
        import transformers as tf
    except ImportError:
        print("transformers is not installed: no hf-*.onnx")
        return
    bert = tf.BertModel(tf.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=64))
    gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4,
                                            bos_token_id=0, eos_token_id=0))
    llama = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=64, hidden_size=32,
                                               intermediate_size=64, num_hidden_layers=2,
                                               num_attention_heads=4, num_key_value_heads=2))
    export(HFWrapper(bert.eval()), (ids, mask), ["input_ids", "attention_mask"],
           out / "hf-bert-ts.onnx", False)
    export(HFWrapper(gpt2.eval()), (ids,), ["input_ids"], out / "hf-gpt2-dynamo.onnx", True)
    export(HFWrapper(llama.eval()), (ids,), ["input_ids"], out / "hf-llama-dynamo.onnx", True)
    # at opset 23 transformers' scaled_dot_product_attention call becomes ONNX's Attention op
    export(HFWrapper(llama.eval()), (ids,), ["input_ids"], out / "hf-llama-op23-dynamo.onnx",
           True, opset=23)


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 12:] = 0
    models = [("resnet", ResNet(), (torch.randn(2, 3, 32, 32),), ["x"]),
              ("bert", Bert(), (ids, mask), ["ids", "mask"]),
              ("gpt2", GPT2(), (ids,), ["ids"])]
    for name, model, args, names in models:
        for dynamo in (False, True):
            export(model, args, names, out / f"{name}-{'dynamo' if dynamo else 'ts'}.onnx",
                   dynamo)
    export_hf(out, ids, mask)
    # tests/gpu/test_onnx_torch.py's Llama-style decoder (nn.RMSNorm, scaled_dot_product_attention
    # with grouped queries), at this file's sizes
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
    import test_onnx_torch
    llama = test_onnx_torch.make_models(torch)["llama"](vocab=64, d=32)
    export(llama, (ids,), ["input_ids"], out / "llama-op23-dynamo.onnx", True, opset=23)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/onnx_exports")
