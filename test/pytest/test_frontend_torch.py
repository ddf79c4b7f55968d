"""PyTorch frontend: from_torch / from_fx parity with PyTorch eager (1e-4 relative), the
unsupported-op report, weights as constants by default, params (keep_params=True) named by
state_dict keys, bind_params."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir.errors import BuildError  # noqa: E402

RTOL = 1e-4


def _rel_err(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _check(model, *inputs, keep_params=False):
    model = model.eval()
    with torch.no_grad():
        want = model(*inputs).numpy()
    mod = mlc.from_torch(model, inputs, keep_params=keep_params)
    got = mlc.compile(mod)(*[i.numpy() for i in inputs])
    err = _rel_err(got, want)
    assert got.shape == want.shape and err < RTOL, (got.shape, want.shape, err)
    return err


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 128), nn.Linear(128, 64), nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return torch.softmax(self.fc3(x), dim=-1)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """torchvision's resnet18 architecture (BasicBlock, [2, 2, 2, 2])."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for i, cout in enumerate((64, 128, 256, 512)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _randomize_bn(model):
    """Non-trivial running statistics, so batch norm is really exercised."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model


def test_mlp_parity():
    torch.manual_seed(0)
    _check(MLP(), torch.randn(4, 64))


def test_resnet18_parity():
    torch.manual_seed(0)
    _check(_randomize_bn(ResNet18()), torch.randn(1, 3, 64, 64))


def test_params_named_by_state_dict_keys_and_bind_params():
    torch.manual_seed(0)
    model = _randomize_bn(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                        nn.Flatten(), nn.Linear(4 * 8 * 8, 5))).eval()
    x = torch.randn(2, 3, 8, 8)
    default = mlc.from_torch(model, (x,))
    assert not default.params and [a.name for a in default.signature("main").args] == ["input"]
    mod = mlc.from_torch(model, (x,), keep_params=True)
    used = {k for k in model.state_dict() if not k.endswith("num_batches_tracked")}
    # the Linear weight is only read transposed: its param is '4.weight.T', made at import
    assert set(mod.params) == used - {"4.weight"} | {"4.weight.T"}
    for k in used - {"4.weight"}:
        np.testing.assert_array_equal(mod.params[k], model.state_dict()[k].numpy())
    np.testing.assert_array_equal(mod.params["4.weight.T"], model.state_dict()["4.weight"].numpy().T)
    with torch.no_grad():
        want = model(x).numpy()
    assert _rel_err(mlc.compile(mod)(x.numpy()), want) < RTOL
    bound = mod.bind_params()
    assert not bound.params
    assert _rel_err(mlc.compile(bound)(x.numpy()), want) < RTOL


class SeedModel(nn.Module):
    """The MLC course seed's model (``torch.matmul`` + ``torch.relu`` on a parameter)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(128, 128))

    def forward(self, x):
        return torch.relu(torch.matmul(x, self.weight))


def test_from_fx_seed_mlp():
    torch.manual_seed(0)
    model = SeedModel()
    gm = torch.fx.symbolic_trace(model)
    mod = mlc.from_fx(gm, input_shapes=[(1, 128)], keep_params=True)
    assert set(mod.params) == {"weight"}
    x = torch.randn(1, 128)
    got = mlc.compile(mod)(x.numpy())
    assert _rel_err(got, model(x).detach().numpy()) < RTOL


def test_from_fx_modules_and_methods():
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 8)

        def forward(self, x):
            y = self.fc2(self.act(self.fc1(x))).view(2, 2, 8)
            return (y + 1.0).sum(-1)

    model = Net().eval()
    mod = mlc.from_fx(torch.fx.symbolic_trace(model), [(4, 32)], keep_params=True)
    assert set(mod.params) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    x = torch.randn(4, 32)
    assert _rel_err(mlc.compile(mod)(x.numpy()), model(x).detach().numpy()) < RTOL


def test_unsupported_ops_reported_once():
    class Bad(nn.Module):
        def forward(self, x):
            y = torch.special.i0(x) + torch.special.i0(x.t()).t()
            return torch.special.ndtri(y)

    with pytest.raises(BuildError) as e:
        mlc.from_torch(Bad(), (torch.randn(3, 3),))
    msg = str(e.value)
    assert "aten.i0.default x2" in msg and "aten.special_ndtri" in msg, msg
    assert "test_frontend_torch.py" in msg and "in forward" in msg, msg


def test_embedding_layer_norm_gelu():
    torch.manual_seed(0)

    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.ln, self.fc = nn.Embedding(50, 16), nn.LayerNorm(16), nn.Linear(16, 16)

        def forward(self, ids):
            h = self.ln(self.emb(ids))
            return nn.functional.gelu(self.fc(h)) + h.mean(-1, keepdim=True)

    _check(Enc(), torch.tensor([[1, 7, 49, 0], [3, 3, 2, 10]]))


def test_small_bert_parity():
    """A 2-layer BERT (random weights, no download): embeddings with position/token-type
    buffers, attention-mask arithmetic folded at import time, SDPA's masked-row handling, GELU,
    layer norm, and the tanh pooler on the [CLS] token."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=256, vocab_size=1000, max_position_embeddings=64)
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg).eval()

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids):
            out = self.bert(input_ids=ids)
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(1))
    model = Wrap().eval()
    with torch.no_grad():
        want = [t.numpy() for t in model(ids)]
    mod = mlc.from_torch(model, (ids,), keep_params=True)
    assert "bert.embeddings.word_embeddings.weight" in mod.params
    got = mlc.compile(mod)(ids.numpy())
    for g, w in zip(got, want):
        assert g.shape == w.shape and _rel_err(g, w) < RTOL, (g.shape, w.shape, _rel_err(g, w))


def test_converter_error_names_node_and_source():
    model = nn.Sequential(nn.ConvTranspose3d(3, 4, 3)).eval()
    with pytest.raises(BuildError, match=r"aten.convolution.default \(node 'convolution', .*'0': "
                                         r"ConvTranspose3d\).*transposed: NCL or NCHW"):
        mlc.from_torch(model, (torch.randn(1, 3, 6, 6, 6),))


def test_from_fx_unsupported_and_shape_count():
    class Bad(nn.Module):
        def forward(self, x):
            return torch.sort(x).values.cumsum(0)

    gm = torch.fx.symbolic_trace(Bad())
    with pytest.raises(BuildError, match=r"call_function sort x1.*\n.*call_method Tensor.cumsum x1"):
        mlc.from_fx(gm, [(3, 4)])
    with pytest.raises(BuildError, match=r"'input_shapes' has 2 shapes; expected 1"):
        mlc.from_fx(torch.fx.symbolic_trace(SeedModel()), [(1, 128), (1, 128)])


def test_from_fx_conv_net():
    torch.manual_seed(0)
    model = _randomize_bn(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                        nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                        nn.Linear(4, 2))).eval()
    mod = mlc.from_fx(torch.fx.symbolic_trace(model), [(1, 3, 8, 8)], keep_params=True)
    assert "1.running_var" in mod.params and "0.weight" in mod.params
    x = torch.randn(1, 3, 8, 8)
    assert _rel_err(mlc.compile(mod)(x.numpy()), model(x).detach().numpy()) < RTOL


def test_conv_transpose_decoder_parity():
    """A small decoder (ConvTranspose2d with stride, padding, output_padding and groups, then a
    Conv2d): aten.convolution with transposed=True imports as ops.conv_transpose2d."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1),
                          nn.ReLU(), nn.ConvTranspose2d(6, 4, 4, stride=1, padding=2, groups=2),
                          nn.Conv2d(4, 3, 3, padding=1))
    x = torch.randn(1, 8, 7, 7)
    _check(model, x)
    _check(model, x)


def test_topk_head_parity():
    """A classifier head returning its top-3 scores and classes (aten.topk: values and int64
    indices, matched exactly against PyTorch)."""
    torch.manual_seed(0)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            return torch.topk(self.fc(x), 3, dim=1)

    model, x = Head().eval(), torch.randn(4, 16)
    with torch.no_grad():
        want_v, want_i = model(x)
    got_v, got_i = mlc.compile(mlc.from_torch(model, (x,)))(x.numpy())
    np.testing.assert_array_equal(got_i, want_i.numpy())
    np.testing.assert_allclose(got_v, want_v.numpy(), rtol=1e-5, atol=1e-6)
