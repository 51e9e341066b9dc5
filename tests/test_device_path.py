"""co3cli.compressors.device: the torch-op path (what CUDA buckets get) against the numba path,
on CPU, bit for bit: symbols, payload bytes, v_hat, error memories; bf16/fp16 inputs against
their float32 upcast."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from co3cli.compressors import ErrorFeedback, get_compressor  # noqa: E402
from co3cli.compressors import device  # noqa: E402
from co3cli.compressors.device import TorchCO3, quantize_t, supported  # noqa: E402
from co3cli.errors import InputError  # noqa: E402
from co3cli.formats import get_grid  # noqa: E402
from co3cli.quantize import quantize  # noqa: E402

FORMATS = ["fp8-e5m2", "fp8-e4m3", "fp8-143-b10", "fp4-co3", "fp4-e2m1", "uniform4",
           "uniform8-c3"]


def _hard_values(grid, scale: np.float32) -> np.ndarray:
    """Every grid value, every midpoint and both float32 neighbours of each, with signs,
    zeros, float32 subnormals and values far past the top, divided by ``scale``."""
    m = grid.values[grid.K:].astype(np.float64)
    mid = (m[1:] + m[:-1]) / 2
    y = np.concatenate([m, mid, m[-1] * np.array([1.5, 2.0, 1e6])]).astype(np.float32)
    y = np.concatenate([y, np.nextafter(y, np.float32(np.inf)), np.nextafter(y, np.float32(0))])
    y = np.concatenate([y, -y, [0.0, -0.0, 1e-45, -1e-45, 1e-39, np.float32(2.0 ** -126)]])
    return (y.astype(np.float32) / scale).astype(np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("scale", [1.0, 0.37, 1e-3, 4096.0])
def test_quantize_t_matches_the_numba_kernel_on_every_hard_value(fmt, scale):
    grid = get_grid(fmt)
    s = np.float32(scale)
    x = _hard_values(grid, s)
    x = x[np.isfinite(x * s)]
    out = torch.empty(x.size, dtype=torch.int32)
    assert quantize_t(torch.from_numpy(x), grid, s, out) == 0
    assert np.array_equal(out.numpy().astype(np.uint16), quantize(x, grid, s))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_quantize_t_counts_nonfinite_products_and_the_path_refuses_them():
    grid = get_grid("fp8-e5m2")
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 3e38])
    assert quantize_t(x, grid, np.float32(10.0), torch.empty(5, dtype=torch.int32)) == 4
    comp = get_compressor("co3", format="fp8-e5m2")
    bad = x.clone()
    with pytest.raises(InputError, match="non-finite") as want:
        comp.compress(bad.numpy(), {}, np.random.default_rng(0))
    with pytest.raises(InputError, match="non-finite") as got:
        TorchCO3(get_compressor("co3", format="fp8-e5m2"), 0.9, "torch").step(0, bad, {})
    assert str(got.value) == str(want.value)


def _stream(rng: np.random.Generator, n: int, steps: int) -> list[np.ndarray]:
    """Gradients of one tensor over ``steps`` calls: magnitudes that jump (refits forced by
    uncodable symbols), a step with zeros, a constant step."""
    out = []
    for step in range(steps):
        g = (rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 1)).astype(np.float32)
        if step == 2:
            g[: n // 3] = 0.0
        if step == 4:
            g *= np.float32(1e3)
        if step == 5:
            g[:] = np.float32(0.25)
        out.append(g)
    return out


def _compare(fmt: str, coder: str, gamma: float, grads: list, refit_every: int = 3,
             cast=None) -> None:
    """ErrorFeedback + CO3.compress (numba) against TorchCO3(path="torch"), step by step."""
    comp = get_compressor("co3", format=fmt, coder=coder, refit_every=refit_every)
    fb = ErrorFeedback(gamma)
    dev = TorchCO3(get_compressor("co3", format=fmt, coder=coder, refit_every=refit_every),
                   gamma, "torch")
    want_state, got_state = {}, {}
    for step, g in enumerate(grads):
        t = torch.from_numpy(g.copy())
        if cast is not None:
            t = t.to(cast)
            g = t.to(torch.float32).numpy()
        want = fb.step(0, g.copy(), comp, want_state, np.random.default_rng(0))
        got = dev.step(0, t, got_state)
        where = f"{fmt} {coder} gamma={gamma} step {step}"
        assert got.payload == want.payload, where
        assert np.array_equal(got.v_hat.numpy(), want.v_hat), where
        assert got.entropy_bits == want.entropy_bits and \
            got.scale_fallbacks == want.scale_fallbacks, where
        e_want, e_got = fb.memory(0), dev.memory(0)
        assert (e_want is None) == (e_got is None), where
        if e_want is not None:
            assert np.array_equal(e_got, e_want), where


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("coder", ["ans", "huffman"])
@pytest.mark.parametrize("gamma", [0.0, 0.9, 1.0])
def test_torch_path_is_bit_identical_to_the_numba_path(fmt, coder, gamma):
    rng = np.random.default_rng(hash((fmt, coder, gamma)) % 2**32)
    _compare(fmt, coder, gamma, _stream(rng, 2501, 7))


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 1001, 4099])
def test_torch_path_on_many_sizes_and_chunk_boundaries(n, monkeypatch):
    monkeypatch.setattr(device, "CHUNK", 1000)  # several torch passes per tensor
    rng = np.random.default_rng(n)
    _compare("fp8-e5m2", "ans", 0.9, _stream(rng, n, 4))
    _compare("fp4-co3", "ans", 0.7, _stream(rng, n, 4), refit_every=2)


def test_the_scale_rules_and_the_ctx_coder_go_through_the_torch_path_too():
    rng = np.random.default_rng(7)
    grads = _stream(rng, 3000, 4)
    comp = get_compressor("co3", format="fp4-co3", scale="co3-poly", refit_every=2)
    dev = TorchCO3(get_compressor("co3", format="fp4-co3", scale="co3-poly", refit_every=2),
                   0.9, "torch")
    fb, a, b = ErrorFeedback(0.9), {"cols": 50}, {"cols": 50}
    for g in grads:
        assert dev.step(1, torch.from_numpy(g.copy()), b).payload == \
            fb.step(1, g.copy(), comp, a, np.random.default_rng(0)).payload
    _compare("fp8-e5m2", "ctx", 0.9, grads)


def test_ctx_steps_streams_through_the_torch_path():
    """Context across steps: the torch path sends the stream's positions and codes in context,
    the same bytes as CO3.compress (refits every 4 calls: key steps and positions 1-3)."""
    rng = np.random.default_rng(11)
    _compare("fp8-e5m2", "ctx-steps", 0.9, _stream(rng, 3000, 6), refit_every=4)
    _compare("fp4-co3", "ctx-steps", 0.0, _stream(rng, 777, 5), refit_every=10)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("path", ["auto", "torch"])
def test_half_precision_input_equals_its_float32_upcast(dtype, path, monkeypatch):
    """A bf16/fp16 tensor goes in as it is; every result equals the float32 upcast's."""
    monkeypatch.setattr(device, "CHUNK", 700)
    rng = np.random.default_rng(3)
    half = getattr(torch, dtype)
    a = TorchCO3(get_compressor("co3", format="fp8-e5m2", refit_every=3), 0.9, path)
    b = TorchCO3(get_compressor("co3", format="fp8-e5m2", refit_every=3), 0.9, path)
    sa, sb = {}, {}
    for g in _stream(rng, 2000, 6):
        h = torch.from_numpy(g).clamp(-6e4, 6e4).to(half)
        pa, pb = a.step(0, h, sa), b.step(0, h.to(torch.float32), sb)
        assert pa.payload == pb.payload
        assert torch.equal(pa.v_hat, pb.v_hat)
        assert np.array_equal(a.memory(0), b.memory(0))
        assert a.memories[0].dtype == torch.float32  # the memory stays float32
    _compare("fp4-co3", "ans", 0.9, _stream(rng, 999, 4), cast=half)


def test_only_supported_grids_take_the_torch_path():
    assert all(supported(get_grid(f)) for f in FORMATS)
    assert not supported(get_grid("uniform10"))  # 1023 symbols: not uint8
    with pytest.raises(InputError, match="not supported"):
        TorchCO3(get_compressor("co3", format="uniform10"), 0.9, "torch")
    with pytest.raises(InputError, match="path 'gpu'"):
        TorchCO3(get_compressor("co3"), 0.9, "gpu")
    TorchCO3(get_compressor("co3", format="uniform10"), 0.9, "auto")  # numba on CPU: fine


def test_memory_checkpoint_round_trip_gives_the_same_next_payload():
    rng = np.random.default_rng(5)
    grads = _stream(rng, 1500, 4)
    a = TorchCO3(get_compressor("co3", format="fp8-e5m2"), 0.9, "torch")
    sa = {}
    for g in grads[:3]:
        a.step(0, torch.from_numpy(g.copy()), sa)
    b = TorchCO3(get_compressor("co3", format="fp8-e5m2"), 0.9, "torch")
    b.load(0, a.memory(0))
    sb = b.comp.import_state(a.comp.export_state(sa))
    assert b.step(0, torch.from_numpy(grads[3].copy()), sb).payload == \
        a.step(0, torch.from_numpy(grads[3].copy()), sa).payload
