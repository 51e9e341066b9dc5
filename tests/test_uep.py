"""UEP-coded matrix multiplication: real encode/decode, exact analysis vs Monte Carlo, bad input."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from co3cli.errors import InputError
from co3cli.simulate import uep

KS = [3, 3, 3]
GAMMA = [0.40, 0.35, 0.25]


def all_codes(ks=KS, big=True):
    """One of each scheme; with ``big`` the random linear codes have enough workers that every
    window gets >= k_l rows with the seeds used (asserted by the callers)."""
    K = sum(ks)
    n_rlc = 60 if big else 30
    return [
        uep.get_code("uncoded", class_sizes=ks),
        uep.get_code("repetition", class_sizes=ks, r=2),
        uep.get_code("mds", class_sizes=ks, workers=K + 6),
        uep.get_code("now-uep", class_sizes=ks, workers=n_rlc, windows=GAMMA),
        uep.get_code("ew-uep", class_sizes=ks, workers=n_rlc, windows=GAMMA),
        uep.get_code("eep", class_sizes=ks, workers=K + 3),
    ]


def in_band(count, trials, p, conf=0.999):
    lo, hi = stats.binom.interval(conf, trials, min(max(p, 0.0), 1.0))
    return lo <= count <= hi


# ----------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("mode,shapes,blocks", [
    ("rxc", ((12, 7), (7, 9)), (3, 3)),     # divides
    ("rxc", ((10, 7), (7, 8)), (3, 3)),     # 10 and 8 don't divide by 3: padded, cropped
    ("cxr", ((6, 18), (18, 5)), 9),         # divides
    ("cxr", ((6, 13), (13, 5)), 9),         # 13 inner columns in 9 parts: padded
])
@pytest.mark.parametrize("stop", ["inf", "all"])
@pytest.mark.parametrize("kind", ["sorted", "contiguous"])
def test_no_stragglers_returns_exact_product(mode, shapes, blocks, stop, kind):
    rng = np.random.default_rng(5)
    # scattered row/column scales, so that the sorted partition really permutes
    A = rng.standard_normal(shapes[0]) * rng.uniform(0.1, 5, (shapes[0][0], 1))
    B = rng.standard_normal(shapes[1]) * rng.uniform(0.1, 5, (1, shapes[1][1]))
    C = A @ B
    for code in all_codes():
        kw = {"deadline": math.inf} if stop == "inf" else {"wait_for": code.n_workers}
        C_hat, info = uep.coded_matmul(A, B, code, mode=mode, blocks=blocks, rng=11, exact=True,
                                       partition=kind, **kw)
        assert C_hat.shape == C.shape
        assert info["arrived"] == code.n_workers
        assert info["recovered"].all(), code.id
        np.testing.assert_allclose(C_hat, C, rtol=1e-9, atol=1e-9, err_msg=code.id)
        assert info["rel_error"] < 1e-20


def test_torch_input_and_seeded_runs():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((9, 6)), rng.standard_normal((6, 9))
    code = uep.get_code("ew-uep", class_sizes=KS, workers=15, windows=GAMMA)
    kw = dict(mode="rxc", blocks=(3, 3), deadline=0.6, latency=uep.Latency(1.0),
              partition="contiguous")  # block (i, j) = C's rows 3i.., columns 3j..
    C1, i1 = uep.coded_matmul(torch.tensor(A, requires_grad=True), torch.tensor(B), code, rng=3,
                              **kw)
    C2, i2 = uep.coded_matmul(A, B, code, rng=np.random.default_rng(3), **kw)
    assert isinstance(C1, np.ndarray)
    np.testing.assert_array_equal(C1, C2)
    assert i1["arrived"] == i2["arrived"] and i1["finish_time"] == i2["finish_time"] == 0.6
    # some seed gives a partial decode; zero-filled blocks are exactly zero, recovered exact
    for seed in range(20):
        C_hat, info = uep.coded_matmul(A, B, code, rng=seed, exact=True, **kw)
        if info["recovered"].any() and not info["recovered"].all():
            break
    else:
        pytest.fail("no partial decode in 20 seeds")
    rec = info["block_recovered"]
    for q, b in enumerate(info["order"]):
        i, j = divmod(int(b), 3)
        blk = C_hat[3 * i:3 * i + 3, 3 * j:3 * j + 3]
        want = (A @ B)[3 * i:3 * i + 3, 3 * j:3 * j + 3] if rec[q] else 0.0
        np.testing.assert_allclose(blk, want, atol=1e-9)
    assert 0 < info["rel_error"] < 1


# ----------------------------------------------------------------------------- analysis vs MC


@pytest.mark.parametrize("code_id", ["now-uep", "ew-uep"])
def test_uep_decoding_frequencies_match_analysis(code_id):
    code = uep.get_code(code_id, class_sizes=KS, workers=30, windows=GAMMA)
    Ns = [6, 9, 12, 18, 24]
    trials = 300
    mc = uep.monte_carlo(code, N=Ns, trials=trials, rng=np.random.default_rng(42))
    exact = uep.decode_probability(code, Ns)
    assert exact.shape == (len(Ns), 3)
    for i, N in enumerate(Ns):
        for c in range(3):
            count = round(mc.decoded[i, c] * trials)
            assert in_band(count, trials, exact[i, c]), (code_id, N, c, mc.decoded[i, c], exact[i, c])
    # UEP: more important classes are decoded more often
    assert np.all(np.diff(exact, axis=1) <= 1e-12)


@pytest.mark.parametrize("code_id,params,Ns", [
    ("uncoded", {}, [3, 5, 7, 8]),
    ("repetition", {"r": 2}, [4, 8, 12, 15]),
    ("mds", {"workers": 12}, [8, 9, 12]),
    ("eep", {"workers": 12}, [8, 9, 12]),
])
def test_blockwise_and_mds_analysis_match_mc(code_id, params, Ns):
    code = uep.get_code(code_id, class_sizes=KS, **params)
    trials = 300
    mc = uep.monte_carlo(code, N=Ns, trials=trials, rng=np.random.default_rng(7))
    p = uep.decode_probability(code, Ns)
    f = uep.recovered_fraction(code, Ns)
    z = stats.norm.ppf(1 - 0.001 / 2)
    for i in range(len(Ns)):
        for c in range(3):
            assert in_band(round(mc.decoded[i, c] * trials), trials, p[i, c]), (code_id, Ns[i], c)
            tol = z * math.sqrt(f[i, c] * (1 - f[i, c]) / trials) + 1e-12
            assert abs(mc.fraction[i, c] - f[i, c]) <= tol, (code_id, Ns[i], c)


def test_exact_formulas_by_hand():
    unc = uep.get_code("uncoded", class_sizes=[2, 3])
    # class of 2 blocks fully arrived among N=3 of 5: C(3, 1) / C(5, 3)
    assert uep.decode_probability(unc, 3)[0] == pytest.approx(3 / 10)
    assert uep.recovered_fraction(unc, 3) == pytest.approx([0.6, 0.6])
    rep = uep.get_code("repetition", class_sizes=[1, 1], r=3)  # n = 6
    # a block is lost iff its 3 copies are among the 6 - N late ones: C(3, N) / C(6, N)
    for N in range(7):
        lost = math.comb(3, N) / math.comb(6, N)
        assert uep.decode_probability(rep, N)[0] == pytest.approx(1 - lost)
    now = uep.get_code("now-uep", class_sizes=KS, workers=30, windows=GAMMA)
    assert uep.decode_probability(now, 10)[2] == pytest.approx(stats.binom.sf(2, 10, 0.25))
    mds = uep.get_code("mds", class_sizes=KS, workers=12)
    assert uep.decode_probability(mds, [8, 9]).tolist() == [[0, 0, 0], [1, 1, 1]]
    ew = uep.get_code("ew-uep", class_sizes=KS, workers=30, windows=GAMMA)
    p = uep.decode_probability(ew, np.arange(31))
    assert np.all(p[:3] == 0) and np.all(np.diff(p, axis=0) >= -1e-12)  # more results never hurt
    # independent brute force over the multinomial split at N = 10 with the Hall condition
    N, want = 10, np.zeros(3)
    for n0, n1 in itertools.product(range(N + 1), repeat=2):
        n2 = N - n0 - n1
        if n2 < 0:
            continue
        split = (n0, n1, n2)
        ok = [all(sum(split[j:l + 1]) >= 3 * (l + 1 - j) for j in range(l + 1)) for l in range(3)]
        pr = stats.multinomial.pmf(split, N, GAMMA)
        want += pr * np.array([any(ok[c:]) for c in range(3)])
    np.testing.assert_allclose(p[N], want, rtol=1e-12)


@pytest.mark.parametrize("kind,scale", [("contiguous", np.repeat), ("sorted", np.tile)])
def test_error_vs_time_matches_mc(kind, scale):
    rng = np.random.default_rng(3)
    A = rng.standard_normal((9, 5)) * scale([4.0, 2.0, 1.0], 3)[:, None]  # tile: scattered rows
    B = rng.standard_normal((5, 6))
    lat = uep.Latency(rate=1.0, shift=0.1)
    times = [0.3, 0.7, 1.5]
    trials = 400
    for code in (uep.get_code("ew-uep", class_sizes=KS, workers=15, windows=GAMMA),
                 uep.get_code("repetition", class_sizes=KS, r=2)):
        mc = uep.monte_carlo(code, times=times, trials=trials, rng=np.random.default_rng(9),
                             A=A, B=B, mode="rxc", blocks=(3, 3), latency=lat, partition=kind)
        exact = uep.error_vs_time(code, mc.energies, times, lat)
        tol = 4 * mc.error_sem + 1e-3
        assert np.all(np.abs(mc.error_mean - exact) <= tol), (code.id, mc.error_mean, exact)
        pt = uep.decode_probability_vs_time(code, times, lat)
        for i in range(len(times)):
            for c in range(3):
                assert in_band(round(mc.decoded[i, c] * trials), trials, pt[i, c]), (code.id, i, c)
    # the error curve: 1 before the shift, decreasing, 0 when everything arrives (repetition)
    e = uep.error_vs_time(code, mc.energies, [0.0, 0.1, 0.5, 1.0, 3.0, math.inf], lat)
    assert e[0] == e[1] == 1.0 and np.all(np.diff(e) <= 1e-12) and e[-1] == 0.0


def test_block_energy():
    s, m, mu_a, var_a, mu_b, var_b = 2, 5, 0.5, 1.5, -0.3, 0.8
    rng = np.random.default_rng(0)
    A = mu_a + math.sqrt(var_a) * rng.standard_normal((20000, s, m))
    B = mu_b + math.sqrt(var_b) * rng.standard_normal((20000, m, s))
    emp = (np.matmul(A, B) ** 2).sum((1, 2))
    want = uep.block_energy(s, m, mu_a, var_a, mu_b, var_b)
    assert abs(emp.mean() - want) < 4 * emp.std() / math.sqrt(len(emp))
    e = uep.class_block_energies([2, 1], s, m, [mu_a, 0.0], [var_a, 1.0], mu_b, var_b)
    assert e.shape == (3,) and e[0] == e[1] == pytest.approx(want)
    assert e[2] == pytest.approx(uep.block_energy(s, m, 0.0, 1.0, mu_b, var_b))


# ----------------------------------------------------------------------------- rank condition


@pytest.mark.parametrize("code_id", ["ew-uep", "now-uep"])
def test_rank_condition_matches_numerical_rank(code_id):
    rng = np.random.default_rng(123)
    for _ in range(150):
        L = int(rng.integers(2, 5))
        ks = [int(k) for k in rng.integers(1, 4, size=L)]
        counts = rng.integers(0, 5, size=L)
        if counts.sum() == 0:
            counts[-1] = 1
        code = uep.get_code(code_id, class_sizes=ks, workers=int(counts.sum()),
                            windows=[1 / L] * L)
        window = np.repeat(np.arange(L), counts)
        G = rng.standard_normal((len(window), code.K)) * code.window_mask[window]
        predicted = code.decodable(counts)
        # ground truth: class c is determined iff its unit rows lie in the row space of G
        r = np.linalg.matrix_rank(G)
        truth = np.array([np.linalg.matrix_rank(np.vstack([G, np.eye(code.K)[code.block_class == c]])) == r
                          for c in range(L)])
        np.testing.assert_array_equal(predicted, truth, err_msg=f"{ks} {counts}")
        # and the decoder recovers exactly those classes, correctly
        P = rng.standard_normal((code.K, 4))
        X, rec = code.decode(G, window, G @ P)
        np.testing.assert_array_equal(code.class_recovered(rec), truth)
        np.testing.assert_allclose(X[rec], P[rec], atol=1e-8)
        assert np.all(X[~rec] == 0)


# ----------------------------------------------------------------------------- importance


@pytest.mark.parametrize("importance", ["frobenius", "mean-abs"])
@pytest.mark.parametrize("mode", ["rxc", "cxr"])
def test_importance_puts_largest_blocks_in_class_0(importance, mode):
    rng = np.random.default_rng(8)
    A = rng.standard_normal((9, 9)) * rng.uniform(0.1, 10, size=(9, 1)) * rng.uniform(0.1, 10, size=(1, 9))
    B = rng.standard_normal((9, 9)) * rng.uniform(0.1, 10, size=(9, 1)) * rng.uniform(0.1, 10, size=(1, 9))
    if importance == "frobenius":
        def size(x):
            return np.linalg.norm(x)
    else:
        def size(x):
            return np.abs(x).mean()
    if mode == "rxc":
        want = [size(A[3 * i:3 * i + 3]) * size(B[:, 3 * j:3 * j + 3]) for i in range(3) for j in range(3)]
        blocks = (3, 3)
    else:
        want = [size(A[:, p:p + 1]) * size(B[p:p + 1]) for p in range(9)]
        blocks = 9
    want = np.array(want)
    kw = dict(mode=mode, blocks=blocks, importance=importance, partition="contiguous")
    part = uep.partition(A, B, **kw)
    np.testing.assert_allclose(part.scores, np.sort(want)[::-1])
    assert set(part.order[:3].tolist()) == set(np.argsort(-want)[:3].tolist())
    code = uep.get_code("uncoded", class_sizes=KS)
    _, info = uep.coded_matmul(A, B, code, rng=0, **kw)
    assert int(info["order"][0]) == int(np.argmax(want)) and info["block_class"][0] == 0


# ----------------------------------------------------------------------------- sorted partition


def _interleaved(n=9, big=10.0):
    """Scales 10 on every third index (0, 3, 6, ...), 1 elsewhere: large rows scattered."""
    s = np.ones(n)
    s[::3] = big
    return s


@pytest.mark.parametrize("sort_by", ["mean-abs", "l2"])
def test_sorted_partition_puts_largest_rows_x_columns_in_class_0(sort_by):
    rng = np.random.default_rng(4)
    A = rng.uniform(0.5, 1.5, (9, 6)) * _interleaved()[:, None]
    B = rng.uniform(0.5, 1.5, (6, 9)) * _interleaved()[None, :]
    shares = {}
    for kind in ("sorted", "contiguous"):
        part = uep.partition(A, B, mode="rxc", blocks=(3, 3), partition=kind, sort_by=sort_by)
        e = part.energies()
        shares[kind] = e[0] / e.sum()
        np.testing.assert_allclose(part.assemble(part.products), A @ B, rtol=1e-13, atol=1e-12)
    rows, cols = uep.partition(A, B, mode="rxc", blocks=(3, 3), sort_by=sort_by).block_rows_cols(0)
    assert set(rows.tolist()) == {0, 3, 6} and set(cols.tolist()) == {0, 3, 6}
    # contiguous: every block holds one large row x one large column, all blocks alike
    assert shares["sorted"] > 0.9 and shares["contiguous"] < 0.2
    # cxr: the inner index (A's column j with B's row j) sorted by the product of the means
    A2 = rng.uniform(0.5, 1.5, (5, 9)) * _interleaved()[None, :]
    B2 = rng.uniform(0.5, 1.5, (9, 4)) * _interleaved()[:, None]
    cx = {kind: uep.partition(A2, B2, mode="cxr", blocks=3, partition=kind, sort_by=sort_by)
          for kind in ("sorted", "contiguous")}
    assert set(cx["sorted"].inner_perm[:3].tolist()) == {0, 3, 6}
    sh = {k: p.energies()[0] / p.energies().sum() for k, p in cx.items()}
    assert sh["sorted"] > 0.99 and sh["contiguous"] < 0.6
    for p in cx.values():
        np.testing.assert_allclose(p.assemble(p.products), A2 @ B2, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("shapes", [((9, 5), (5, 9)), ((10, 7), (7, 8))])
def test_sorted_lost_blocks_land_on_their_rows_and_columns(shapes):
    rng = np.random.default_rng(6)
    A = rng.standard_normal(shapes[0]) * rng.permutation(np.geomspace(0.1, 10, shapes[0][0]))[:, None]
    B = rng.standard_normal(shapes[1]) * rng.permutation(np.geomspace(0.1, 10, shapes[1][1]))[None, :]
    C = A @ B
    code = uep.get_code("ew-uep", class_sizes=KS, workers=15, windows=GAMMA)
    for seed in range(40):
        C_hat, info = uep.coded_matmul(A, B, code, blocks=(3, 3), deadline=0.6, rng=seed)
        if info["recovered"].any() and not info["recovered"].all():
            break
    else:
        pytest.fail("no partial decode in 40 seeds")
    part = info["partition"]
    assert part.kind == "sorted" and part.row_perm is not None
    covered = np.zeros(C.shape, int)
    for q, ok in enumerate(info["block_recovered"]):
        r, c = part.block_rows_cols(q)
        covered[np.ix_(r, c)] += 1
        np.testing.assert_allclose(C_hat[np.ix_(r, c)], C[np.ix_(r, c)] if ok else 0.0, atol=1e-9)
    assert np.all(covered == 1)  # the blocks tile C exactly once
    # class 0 (recovered) covers the largest rows x largest columns
    r0, c0 = part.block_rows_cols(0)
    assert set(r0.tolist()) == set(np.argsort(-np.abs(A).mean(1))[:len(r0)].tolist())


# ----------------------------------------------------------------------------- bad input


def _mm(code=None, A=None, B=None, **kw):
    A = np.ones((9, 4)) if A is None else A
    B = np.ones((4, 9)) if B is None else B
    code = code or uep.get_code("uncoded", class_sizes=KS)
    return uep.coded_matmul(A, B, code, **{"blocks": (3, 3), "rng": 0, **kw})


BAD = [
    ("shapes", lambda: _mm(A=np.ones((3, 4)), B=np.ones((5, 2))), "3x4"),
    ("windows sum", lambda: uep.get_code("ew-uep", class_sizes=KS, workers=10, windows=[0.4, 0.4, 0.4]),
     "windows must sum to 1"),
    ("windows length", lambda: uep.get_code("now-uep", class_sizes=KS, workers=10, windows=[0.5, 0.5]),
     "windows"),
    ("windows <= 0", lambda: uep.get_code("now-uep", class_sizes=KS, workers=10, windows=[1.0, 0.0, 0.0]),
     "windows"),
    ("class sizes", lambda: _mm(code=uep.get_code("uncoded", class_sizes=[3, 3, 2])), "class_sizes"),
    ("more classes", lambda: _mm(code=uep.get_code("uncoded", class_sizes=[1, 1, 1]), blocks=(1, 2)),
     "more classes than blocks"),
    ("class sizes arg", lambda: _mm(class_sizes=[4, 5]), "class_sizes"),
    ("rate 0", lambda: _mm(latency=0.0), "rate"),
    ("rate < 0", lambda: uep.Latency(rate=-1.0), "rate"),
    ("shift", lambda: uep.Latency(rate=1.0, shift=-1.0), "shift"),
    ("deadline 0", lambda: _mm(deadline=0.0), "deadline"),
    ("deadline < 0", lambda: _mm(deadline=-2), "deadline"),
    ("unknown code", lambda: uep.get_code("turbo", class_sizes=KS), "unknown UEP code 'turbo'"),
    ("unknown param", lambda: uep.get_code("mds", class_sizes=KS, workers=9, window=[1]), "window"),
    ("no class sizes", lambda: uep.get_code("uncoded"), "class_sizes"),
    ("r", lambda: uep.get_code("repetition", class_sizes=KS, r=0), "r"),
    ("mds workers", lambda: uep.get_code("mds", class_sizes=KS, workers=5), "workers"),
    ("uncoded workers", lambda: uep.get_code("uncoded", class_sizes=KS, workers=5), "workers"),
    ("wait_for", lambda: _mm(wait_for=10), "wait_for"),
    ("mode", lambda: _mm(mode="rxr"), "mode"),
    ("importance", lambda: _mm(importance="max"), "importance"),
    ("partition", lambda: _mm(partition="random"),
     "partition must be one of sorted, contiguous, got 'random'"),
    ("sort_by", lambda: _mm(sort_by="max"), "sort_by must be one of mean-abs, l2, got 'max'"),
    ("blocks", lambda: _mm(blocks=3), "blocks"),
    ("N range", lambda: uep.decode_probability(uep.get_code("uncoded", class_sizes=KS), 10), "N"),
    ("energies", lambda: uep.error_vs_time(uep.get_code("uncoded", class_sizes=KS), [1, 2], [1.0]),
     "block_energies"),
]


@pytest.mark.parametrize("what,fn,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_input_error(what, fn, needle):
    with pytest.raises(InputError) as e:
        fn()
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_registry_and_config():
    assert set(uep.CODES) == {"uncoded", "repetition", "mds", "now-uep", "ew-uep", "eep"}
    cfg = uep.get_code("ew-uep", class_sizes="3,3,3", workers="15", windows="0.4,0.35,0.25").config()
    assert cfg == {"id": "ew-uep", "class_sizes": [3, 3, 3], "workers": 15,
                   "windows": [0.4, 0.35, 0.25]}
    assert uep.get_code(**uep.get_code("repetition", class_sizes=KS, r=3).config()).n_workers == 27
    assert uep.even_class_sizes(10, 3) == (4, 3, 3)


def test_latency_scaled_by_work():
    from co3cli.simulate.uep import Latency

    base = Latency(rate=2.0, shift=0.5)
    w = base.scaled(9 / 4)
    assert w.rate == pytest.approx(2.0 / 2.25) and w.shift == pytest.approx(0.5 * 2.25)
    rng = np.random.default_rng(0)
    x = w.sample(200000, rng)
    assert x.mean() == pytest.approx(2.25 * (0.5 + 0.5), rel=0.01)  # w * mean(shift + Exp)
    t = np.array([0.5, 1.5, 3.0])
    assert np.allclose(w.cdf(t), base.cdf(t / 2.25))  # same law on a stretched clock
    assert Latency.for_blocks(4, reference_K=9, rate=2.0, shift=0.5) == w
    with pytest.raises(InputError, match="work=0 must be a finite number > 0"):
        base.scaled(0)
