"""The numpy fixed-point emulator against the real thing.

* ``fixed_point``: every quantization/overflow mode is compared with ``ap_fixed`` itself,
  compiled with g++ against hls4ml's ap_types headers;
* ``FixedPointModel``: hls4ml projects are built from small PyTorch models (once per module)
  and the emulator must equal ``HLSModel.predict`` (hls4ml's C-simulation) bit for bit.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hls4ml = pytest.importorskip("hls4ml")

from fpgaserve.backends.hls4ml.emulator import FixedPointModel, UnsupportedLayerError  # noqa: E402
from fpgaserve.backends.hls4ml.fixed_point import FixedType, cast_f64, f64_capable, from_float_f64  # noqa: E402
from fpgaserve.backends.hls4ml.project import Hls4mlProject, ProjectError  # noqa: E402
from fpgaserve.backends.hls4ml.wide import Wide, mul, mul64  # noqa: E402
from support.server_process import BUNDLED_REPO  # noqa: E402

AP_TYPES = Path(hls4ml.__file__).parent / "templates" / "vivado" / "ap_types"
QUANT = ["AP_TRN", "AP_TRN_ZERO", "AP_RND", "AP_RND_ZERO", "AP_RND_INF", "AP_RND_MIN_INF", "AP_RND_CONV"]
OVERFLOW = ["AP_WRAP", "AP_SAT", "AP_SAT_ZERO", "AP_SAT_SYM"]


# ---------------------------------------------------------------------------- ap_fixed itself
WIDER = [
    "ap_fixed<93,45>",
    "ap_fixed<80,30,AP_RND,AP_SAT>",
    "ap_fixed<73,20,AP_RND_CONV,AP_SAT_SYM>",
    "ap_ufixed<90,40,AP_RND_ZERO,AP_SAT>",
    "ap_fixed<70,36,AP_RND_INF,AP_SAT_ZERO>",
    "ap_fixed<120,60,AP_TRN_ZERO,AP_WRAP>",
    "ap_fixed<100,20,AP_RND_MIN_INF,AP_WRAP>",
    "ap_fixed<66,30,AP_TRN,AP_SAT>",
    "ap_fixed<16,6,AP_RND,AP_SAT>",
    "ap_fixed<40,12,AP_RND_MIN_INF,AP_WRAP>",
    "ap_ufixed<50,10,AP_RND_CONV,AP_SAT_SYM>",
]


def _probe_values() -> np.ndarray:
    rng = np.random.default_rng(0)
    grid = np.arange(-40, 40, 1 / 64)
    return np.concatenate(
        [
            rng.normal(0, 4, 1500),
            rng.normal(0, 50, 500),
            rng.normal(0, 1e-3, 200),
            grid,
            grid + 1 / 128,
            grid + 1 / 256,
            grid + 2**-10,  # grid points and exact ties
            np.nextafter(grid, np.inf),
            np.nextafter(grid, -np.inf),
            [0.0, -0.0, 1e30, -1e30, 5e-324, -5e-324, 2.0**40, -(2.0**40), 31.99, -32, -16, 16, -4, 4, -0.3, -0.7],
        ]
    )


def _sext(lines, t: FixedType) -> np.ndarray:
    vals = [int(v) for v in lines]
    if t.signed:
        vals = [v - (1 << t.width) if v >> (t.width - 1) else v for v in vals]
    return np.array(vals, dtype=np.int64)


@pytest.fixture(scope="module")
def ap_fixed_reference(tmp_path_factory):
    """Raw bits of C++ ap_fixed conversions for many types and modes."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not available")
    narrow = []
    for q in QUANT:
        for o in OVERFLOW:
            narrow += [f"ap_fixed<8,3,{q},{o}>", f"ap_ufixed<7,2,{q},{o}>"]
    narrow += [
        "ap_fixed<8,3,AP_RND,AP_WRAP,1>",
        "ap_fixed<8,3,AP_TRN,AP_WRAP,3>",
        "ap_ufixed<8,3,AP_TRN,AP_WRAP,2>",
        "ap_fixed<40,12,AP_RND_CONV,AP_SAT>",
        "ap_fixed<6,8>",
        "ap_fixed<6,-2,AP_RND,AP_SAT>",
        "ap_int<5>",
        "ap_uint<5>",
        "ap_fixed<16,6>",
    ]
    sources = ["ap_fixed<16,6>", "ap_fixed<12,8>", "ap_ufixed<12,5>"]
    wide = narrow + [
        "ap_fixed<63,20,AP_RND,AP_SAT>",
        "ap_fixed<63,40,AP_RND_CONV,AP_SAT_SYM>",
        "ap_fixed<60,30,AP_TRN,AP_WRAP,4>",
        "ap_fixed<62,30>",
    ]
    lines = [
        '#include "ap_fixed.h"',
        "#include <cstdio>",
        "#include <vector>",
        "template<class T> unsigned long long bits(T v){ ap_uint<64> u = v.range(T::width-1,0); return u.to_uint64(); }",
        'int main(){ int n; if (scanf("%d",&n) != 1) return 1; std::vector<double> x(n);',
        'for(int i=0;i<n;i++) if (scanf("%la",&x[i]) != 1) return 1;',
    ]
    for t in narrow:  # double constructor, then float/double conversions back
        lines.append(
            f"for(int i=0;i<n;i++){{ {t} v = x[i]; float f = v; double d = v; "
            f'printf("%llu %a %a\\n", bits(v), (double)f, d); }}'
        )
    for s in sources:  # assignment between fixed types
        for t in narrow:
            lines.append(f'for(int i=0;i<n;i++){{ {s} a = x[i]; {t} v = a; printf("%llu\\n", bits(v)); }}')
    for t in wide:  # assignment from an exact 62-bit product
        lines.append(
            f"for(int i=0;i<n;i++){{ ap_fixed<31,15> a = x[i]; ap_fixed<31,15> b = x[i]*1.37; "
            f"ap_fixed<62,30> p = a*b; {t} v = p; float f = v; double d = v; "
            f'printf("%llu %a %a\\n", bits(v), (double)f, d); }}'
        )
    for t in WIDER:  # assignment from an exact 93-bit product (Wide raws), bits as two 64-bit halves
        lines.append(
            f"for(int i=0;i<n;i++){{ ap_fixed<31,15> a = x[i]; ap_fixed<31,15> b = x[i]*1.37; "
            f"ap_fixed<31,15> c = x[i]*0.61+1; ap_fixed<93,45> p = a*b*c; {t} v = p; "
            f"ap_uint<128> u = v.range({t}::width-1,0); float f = v; double d = v; "
            f'printf("%llu %llu %a %a\\n", u.range(127,64).to_uint64(), u.range(63,0).to_uint64(), (double)f, d); }}'
        )
    lines.append("return 0; }")
    work = tmp_path_factory.mktemp("apfixed")
    (work / "probe.cpp").write_text("\n".join(lines))
    subprocess.run(["g++", "-O1", "-std=c++14", f"-I{AP_TYPES}", "probe.cpp", "-o", "probe"], cwd=work, check=True)
    x = _probe_values()
    stdin = f"{len(x)}\n" + "\n".join(float(v).hex() for v in x)
    out = subprocess.run([str(work / "probe")], input=stdin, capture_output=True, text=True, check=True).stdout.split(
        "\n"
    )
    return {"x": x, "out": out, "narrow": narrow, "sources": sources, "wide": wide}


def test_wide_fixed_point_matches_ap_fixed(ap_fixed_reference):
    """Types beyond 63 bits (Wide raws) and narrow types fed from a 93-bit product, against
    ap_fixed: every quantization and overflow mode, and both conversions back to floats."""
    ref = ap_fixed_reference
    x, out, n = ref["x"], ref["out"], len(ref["x"])
    pos = len(out) - 1 - n * len(WIDER)  # the last section of the probe's output
    a = FixedType.parse("ap_fixed<31,15>")
    product = mul(mul64(a.from_float(x), a.from_float(x * 1.37)), a.from_float(x * 0.61 + 1))  # 48 fractional bits
    failures = []
    for text in WIDER:
        t = FixedType.parse(text)
        rows = [line.split() for line in out[pos : pos + n]]
        pos += n
        want = [(int(r[0]) << 64) | int(r[1]) for r in rows]
        if t.signed:
            want = [v - (1 << t.width) if v >> (t.width - 1) else v for v in want]
        raw = t.from_raw(product, 48)
        got = raw.to_ints() if isinstance(raw, Wide) else raw
        if [int(v) for v in got] != want:
            failures.append(f"ap_fixed<93,45> -> {text}")
        if not np.array_equal(t.to_float32(raw).astype(np.float64), [float.fromhex(r[2]) for r in rows]):
            failures.append(f"{text} (from 93 bits) -> float")
        if not np.array_equal(t.to_float(raw), [float.fromhex(r[3]) for r in rows]):
            failures.append(f"{text} (from 93 bits) -> double")
    assert not failures, failures


def test_fixed_point_matches_ap_fixed(ap_fixed_reference):
    ref = ap_fixed_reference
    x, out, n = ref["x"], ref["out"], len(ref["x"])
    pos, failures = 0, []
    for text in ref["narrow"]:
        t = FixedType.parse(text)
        rows = [line.split() for line in out[pos : pos + n]]
        pos += n
        raw = t.from_float(x)
        if not np.array_equal(raw, _sext([r[0] for r in rows], t)):
            failures.append(f"double -> {text}")
        if f64_capable(t) and not np.array_equal(from_float_f64(t, x), _sext([r[0] for r in rows], t)):
            failures.append(f"double -> {text} (float64 path)")
        if not np.array_equal(t.to_float32(raw).astype(np.float64), [float.fromhex(r[1]) for r in rows]):
            failures.append(f"{text} -> float")
        if not np.array_equal(t.to_float(raw), [float.fromhex(r[2]) for r in rows]):
            failures.append(f"{text} -> double")
    for stext in ref["sources"]:
        s = FixedType.parse(stext)
        sraw = s.from_float(x)
        for text in ref["narrow"]:
            t = FixedType.parse(text)
            want = _sext(out[pos : pos + n], t)
            if not np.array_equal(t.cast(sraw, s), want):
                failures.append(f"{stext} -> {text}")
            # the float64 chain's cast, with and without the source type's bounds
            bounds = (float(s.raw_min), float(s.raw_max))
            for lo, hi in ((None, None), bounds):
                if f64_capable(t) and not np.array_equal(cast_f64(t, sraw.astype(np.float64), s.frac, lo, hi), want):
                    failures.append(f"{stext} -> {text} (float64 path, bounds {lo}, {hi})")
            pos += n
    a = FixedType.parse("ap_fixed<31,15>")
    product = a.from_float(x) * a.from_float(x * 1.37)  # 32 fractional bits, exact
    for text in ref["wide"]:
        t = FixedType.parse(text)
        rows = [line.split() for line in out[pos : pos + n]]
        pos += n
        raw = t.from_raw(product, 32)
        if not np.array_equal(raw, _sext([r[0] for r in rows], t)):
            failures.append(f"ap_fixed<62,30> -> {text}")
        small = np.abs(product) < 2**52  # the float64 chain holds exact integers below 2**52
        if f64_capable(t) and not np.array_equal(
            cast_f64(t, product[small].astype(np.float64), 32), _sext([r[0] for r in rows], t)[small]
        ):
            failures.append(f"ap_fixed<62,30> -> {text} (float64 path)")
        if not np.array_equal(t.to_float32(raw).astype(np.float64), [float.fromhex(r[1]) for r in rows]):
            failures.append(f"{text} (wide) -> float")
        if not np.array_equal(t.to_float(raw), [float.fromhex(r[2]) for r in rows]):
            failures.append(f"{text} (wide) -> double")
    assert not failures, failures


def test_type_parsing():
    assert FixedType.parse("ap_fixed<16,6>") == FixedType(16, 6)
    assert FixedType.parse("ap_fixed<16, 6, AP_RND, AP_SAT>") == FixedType(16, 6, True, "AP_RND", "AP_SAT")
    assert FixedType.parse("fixed<16,6,RND_CONV,SAT_SYM,0>") == FixedType(16, 6, True, "AP_RND_CONV", "AP_SAT_SYM")
    assert FixedType.parse("ufixed<8,0,TRN,WRAP,2>") == FixedType(8, 0, False, "AP_TRN", "AP_WRAP", 2)
    assert FixedType.parse("ap_uint<1>").signed is False
    assert FixedType.parse("ap_int<8>").integer_type
    for bad in (
        "ap_fixed<125,10>",  # beyond the Wide raws (126 bits less a carry)
        "ap_fixed<80,10,AP_TRN,AP_WRAP,2>",  # saturation bits are emulated up to 63 bits only
        "ap_fixed<16,6,AP_FOO>",
        "ap_fixed<16,6,AP_TRN,AP_WRAP_SM>",
        "float",
        "ap_fixed<16>",
    ):
        with pytest.raises(ValueError):
            FixedType.parse(bad)
    with pytest.raises(ValueError, match="53 bits"):
        FixedType.parse("ap_fixed<60,20>").from_float(np.array([1.0]))


# ---------------------------------------------------------------------------- hls4ml projects
class Facile(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.relu1 = torch.nn.Linear(47, 36), torch.nn.ReLU()
        self.fc2, self.relu2 = torch.nn.Linear(36, 36), torch.nn.ReLU()
        self.fc3 = torch.nn.Linear(36, 1)

    def forward(self, x):
        return self.fc3(self.relu2(self.fc2(self.relu1(self.fc1(x)))))


class JetTagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.relu1 = torch.nn.Linear(16, 64), torch.nn.ReLU()
        self.fc2, self.relu2 = torch.nn.Linear(64, 32), torch.nn.ReLU()
        self.fc3, self.relu3 = torch.nn.Linear(32, 32), torch.nn.ReLU()
        self.fc4, self.softmax = torch.nn.Linear(32, 5), torch.nn.Softmax(dim=1)

    def forward(self, x):
        x = self.relu3(self.fc3(self.relu2(self.fc2(self.relu1(self.fc1(x))))))
        return self.softmax(self.fc4(x))


class BatchNormNet(torch.nn.Module):
    """BatchNorm after the ReLU, so hls4ml cannot fold it into the Dense: nnet::normalize."""

    def __init__(self):
        super().__init__()
        self.fc1, self.relu1, self.bn = torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.BatchNorm1d(20)
        self.fc2, self.sig = torch.nn.Linear(20, 3), torch.nn.Sigmoid()

    def forward(self, x):
        return self.sig(self.fc2(self.bn(self.relu1(self.fc1(x)))))


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act1 = torch.nn.Linear(12, 24), torch.nn.LeakyReLU(0.1)
        self.fc2, self.act2 = torch.nn.Linear(24, 16), torch.nn.Tanh()
        self.fc3, self.softmax = torch.nn.Linear(16, 6), torch.nn.Softmax(dim=1)

    def forward(self, x):
        return self.softmax(self.fc3(self.act2(self.fc2(self.act1(self.fc1(x))))))


class SmallSoftmax(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.softmax = torch.nn.Linear(8, 5), torch.nn.Softmax(dim=1)

    def forward(self, x):
        return self.softmax(self.fc1(x))


class WithPrelu(torch.nn.Module):
    """PReLU() with one shared slope: hls4ml 1.3 writes it as a 1-value array that nnet::prelu
    reads at every index, past its end, so the emulator refuses it."""

    def __init__(self):
        super().__init__()
        self.fc1, self.prelu = torch.nn.Linear(4, 3), torch.nn.PReLU()

    def forward(self, x):
        return self.prelu(self.fc1(x))


def _init(model: torch.nn.Module, seed: int, scale: float = 0.3) -> torch.nn.Module:
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(g.normal(0, scale, size=tuple(p.shape)).astype(np.float32)))
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.copy_(torch.from_numpy(g.normal(0, 1, m.num_features).astype(np.float32)))
                m.running_var.copy_(torch.from_numpy(g.uniform(0.5, 2, m.num_features).astype(np.float32)))
    return model.eval()


def _convert(
    model,
    n_in: int,
    outdir: Path,
    tweak=None,
    io_type="io_parallel",
    backend="VivadoAccelerator",
    compile=True,
    **extra,
):
    cfg = hls4ml.utils.config_from_pytorch_model(
        model, input_shape=(n_in,), granularity="name", backend=backend, default_precision="ap_fixed<16,6>"
    )
    if tweak:
        tweak(cfg["LayerName"])
    kwargs = {"board": "alveo-u250"} if backend == "VivadoAccelerator" else {}
    hm = hls4ml.converters.convert_from_pytorch_model(
        model, hls_config=cfg, backend=backend, io_type=io_type, output_dir=str(outdir), **kwargs, **extra
    )
    if compile:
        hm.compile()
    else:
        hm.write()
    return hm


def _tweak_jet(layers):
    layers["fc4"]["Precision"]["result"] = "ap_fixed<16,6>"  # a softmax input whose top bits vary


def _tweak_bn(layers):
    layers["fc1"].update(Strategy="Resource", ReuseFactor=5)  # DenseResource_rf_leq_nin
    layers["fc2"].update(Strategy="Resource", ReuseFactor=60)  # DenseResource_rf_gt_nin_rem0


def _tweak_mixed(layers):
    layers["fc1"]["Precision"].update(result="ap_fixed<10,4,AP_RND,AP_SAT>", accum="ap_fixed<20,8,AP_RND_CONV,AP_SAT>")
    layers["act1"]["Precision"]["result"] = "ap_fixed<12,4,AP_RND_ZERO,AP_SAT_SYM>"
    layers["fc2"]["Precision"].update(
        weight="ap_fixed<8,2,AP_RND,AP_SAT>", accum="ap_fixed<18,6>", result="ap_fixed<14,5>"
    )
    layers["fc3"]["Precision"]["result"] = "ap_fixed<12,5,AP_RND,AP_SAT>"
    layers["softmax"]["Implementation"] = "latency"


def _softmax_impl(impl):
    def tweak(layers):
        layers["fc1"]["Precision"]["result"] = "ap_fixed<16,6>"
        layers["softmax"]["Implementation"] = impl

    return tweak


MODELS = {
    # name: (model class, seed, n_in, tweak, extra convert kwargs)
    "facile": (Facile, 1234, 47, None, {}),
    "jet": (JetTagger, 5, 16, _tweak_jet, {}),
    "batchnorm": (BatchNormNet, 7, 10, _tweak_bn, {}),
    "mixed": (Mixed, 11, 12, _tweak_mixed, {}),
    "softmax_legacy": (SmallSoftmax, 13, 8, _softmax_impl("legacy"), {}),
    "softmax_argmax": (SmallSoftmax, 17, 8, _softmax_impl("argmax"), {}),
    "softmax_stable": (SmallSoftmax, 19, 8, _softmax_impl("stable"), {}),
    "vivado_backend": (Facile, 23, 47, None, {"backend": "Vivado"}),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("hls4ml_emulator")
    cache = {}

    def get(name):
        if name not in cache:
            cls, seed, n_in, tweak, extra = MODELS[name]
            hm = _convert(_init(cls(), seed), n_in, root / name, tweak, **extra)
            cache[name] = (hm, root / name, n_in)
        return cache[name]

    return get


def _edge_inputs(n_in: int, rng) -> np.ndarray:
    grid = rng.integers(-32 * 1024, 32 * 1024, size=(40, n_in)) / 1024.0  # ap_fixed<16,6> grid points
    rows = [
        np.zeros((1, n_in)),
        -np.ones((1, n_in)),
        grid,
        np.nextafter(grid, np.inf),
        np.nextafter(grid, -np.inf),  # just above / below grid points
        grid + 2**-11,  # halfway between grid points
        np.full((1, n_in), 31.999),
        np.full((1, n_in), -32.0),
        np.full((1, n_in), 32.0),  # input wrap edges
        rng.normal(0, 1e3, size=(20, n_in)),
        rng.normal(0, 1e6, size=(5, n_in)),  # wrap far away
        rng.normal(0, 40, size=(50, n_in)),
    ]
    return np.concatenate(rows)


def _assert_bit_exact(name, built):
    hm, outdir, n_in = built(name)
    model = FixedPointModel(Hls4mlProject.load(outdir))
    rng = np.random.default_rng(42)
    for x in (rng.normal(0, 1, size=(2000, n_in)), rng.normal(0, 8, size=(1000, n_in)), _edge_inputs(n_in, rng)):
        ref = np.asarray(hm.predict(np.ascontiguousarray(x.astype(np.float64)))).reshape(len(x), -1)
        got = model.predict(x)
        assert got.dtype == np.float64 and got.shape == ref.shape
        bad = np.nonzero(np.any(got != ref, axis=1))[0]
        assert bad.size == 0, f"{name}: {bad.size} rows differ, first {x[bad[0]]}: {got[bad[0]]} vs {ref[bad[0]]}"
    # float32 requests reach the card as the same FP32 words
    x32 = rng.normal(0, 4, size=(300, n_in)).astype(np.float32)
    ref = np.asarray(hm.predict(np.ascontiguousarray(x32.astype(np.float64)))).reshape(len(x32), -1)
    assert np.array_equal(model.predict(x32), ref)
    return model, ref


@pytest.mark.parametrize("name", list(MODELS))
def test_bit_exact_with_csim(name, built):
    _model, ref = _assert_bit_exact(name, built)
    if name in ("jet", "mixed", "softmax_legacy", "softmax_stable"):
        # the softmax must actually discriminate, or the comparison proves little
        assert len(np.unique(ref)) > 20


def test_layers_recognised(built):
    _hm, outdir, _ = built("batchnorm")
    model = FixedPointModel(Hls4mlProject.load(outdir))
    kinds = [layer.kind for layer in model.graph.layers]
    assert kinds == ["dense", "relu", "normalize", "dense", "sigmoid"]
    kernels = [layer.config["using"]["kernel"] for layer in model.graph.layers if layer.kind == "dense"]
    assert kernels == ["nnet::DenseResource_rf_leq_nin", "nnet::DenseResource_rf_gt_nin_rem0"]


def test_unsupported_layer_is_a_load_error(tmp_path):
    _convert(_init(WithPrelu(), 3), 4, tmp_path / "prelu", compile=False)
    with pytest.raises(UnsupportedLayerError, match=r"layer 'prelu' \(nnet::prelu.*the firmware reads beyond it"):
        FixedPointModel(Hls4mlProject.load(tmp_path / "prelu"))
    assert issubclass(UnsupportedLayerError, ProjectError)


def test_io_stream_is_read_and_other_io_types_refused(tmp_path):
    """io_stream firmware is emulated (tests/hls4ml/test_hls4ml_io_stream.py checks it bit for bit);
    an io type hls4ml's writers do not have is refused by name."""
    _convert(_init(Facile(), 3), 47, tmp_path / "stream", io_type="io_stream", compile=False)
    model = FixedPointModel(Hls4mlProject.load(tmp_path / "stream"))
    assert all(layer.stream for layer in model.graph.layers) and model.n_in == 47
    config = tmp_path / "stream" / "hls4ml_config.yml"
    config.write_text(config.read_text().replace("IOType: io_stream", "IOType: io_serial"))
    with pytest.raises(ProjectError, match="io_serial"):
        FixedPointModel(Hls4mlProject.load(tmp_path / "stream"))


def test_inconsistent_graphs_are_refused(built, tmp_path):
    _hm, outdir, _ = built("facile")

    def edited(name, old, new):
        copy = tmp_path / name
        shutil.copytree(outdir, copy, ignore=shutil.ignore_patterns("*.so", "nnet_utils", "ap_types"))
        top = copy / "firmware" / "myproject.cpp"
        text = top.read_text().replace(old, new)
        assert text != top.read_text()
        top.write_text(text)
        return Hls4mlProject.load(copy)

    # the second dense reads an array no earlier layer wrote
    with pytest.raises(UnsupportedLayerError, match="reads 'layer5_out', which no earlier layer wrote"):
        FixedPointModel(edited("order", "config4>(layer3_out", "config4>(layer5_out"))
    # the second dense reads the first dense's output, whose type is not the one it declares
    with pytest.raises(UnsupportedLayerError, match=r"input type .* differs from the type of 'layer2_out'"):
        FixedPointModel(edited("types", "config4>(layer3_out", "config4>(layer2_out"))


@pytest.mark.parametrize("name", ["facile", "jet_tagger", "calo_cnn"])
def test_zero_rows_give_zero_rows(name):
    """0 rows in, 0 rows out (an ensemble step can hand a model an empty batch); the emulator
    once raised in its reshape."""
    model = FixedPointModel(Hls4mlProject.load(BUNDLED_REPO / name / "1"))
    for x in (np.zeros((0, model.n_in)), np.zeros((0, model.n_in), np.float32).reshape(0, 1, model.n_in)):
        y = model.predict(x)
        assert y.shape == (0, model.n_out) and y.dtype == np.float64
    assert model.predict(np.ones((3, model.n_in))).shape == (3, model.n_out)
    with pytest.raises(ValueError, match=f"expected {model.n_in} input values per sample, got {model.n_in + 1}"):
        model.predict(np.zeros((0, model.n_in + 1)))
