"""UEP-coded matrix multiplication against stragglers: encode, compute, decode, and the exact analysis.

Implements the scheme of B. Tegin, E. E. Hernandez, S. Rini, T. M. Duman, "Straggler Mitigation
through Unequal Error Protection for Distributed Approximate Matrix Multiplication", IEEE Journal
on Selected Areas in Communications 40(2), 2022, doi:10.1109/JSAC.2021.3118350 (conference
version: IEEE ICC 2021).

A server farms ``C = A @ B`` out to ``n`` workers; some straggle. The block products are
encoded with unequal error protection (blocks with larger norms get more protection), the
server stops at a deadline (or after the first ``wait_for`` results) and decodes an approximate
product from what arrived. Everything here is really computed (coded products, decoding,
``C_hat``); the exact analysis (``decode_probability``, ``error_vs_time``) predicts what the
Monte Carlo (``monte_carlo``) measures.

Data flow (``coded_matmul``)::

    A (m x k), B (k x p)
      |-- matmul.partition --> rows/columns sorted by mean|.| (the authors' construction;
      |     or contiguous), uniform split, K importance-ranked block products A_b B_b, in classes
      |-- codes: code.generator(rng) --> G (n x K), each worker's window
      |-- worker w computes Y_w = sum_b G[w, b] (A_b B_b)
      |-- latency: T_w i.i.d. shift + Exp(rate); the results in by the deadline (or the
      |     first wait_for)
      |-- codes: code.decode(G[arrived], window[arrived], Y[arrived]) --> recovered blocks
      `-- matmul: assemble C_hat (lost blocks are zero), un-permuted to the original order
    analysis:   code.analysis(N) x Binomial(n, F(t)) --> P(class decoded by t), error vs t
    montecarlo: many coded runs --> the same figures, measured
    train:      coded back-propagation (every nn.Linear's backward products coded)
    report:     the schemes and tables of ``co3 simulate uep analyze | mc``

Modules: ``codes`` (Code and the registry ``CODES``: uncoded, repetition, mds, eep, now-uep,
ew-uep), ``latency`` (Latency, deadlines), ``matmul`` (partition, coded_matmul), ``analysis``,
``montecarlo``, ``train`` and ``report`` (imported on their own: ``co3cli.simulate.uep.train``).

COST MODEL. Every worker computes one block-product-sized task and has an i.i.d. completion
time (exponential with rate ``rate``, optionally shifted by ``shift``). The coded product of
a window is computed in the simulation as ``sum_b alpha_b (A_b B_b)`` (numerically what an
input-encoded scheme, ``(sum alpha A) (sum beta B)`` per worker, would return for a linear
code over the block products). So which workers arrive is independent of which windows they
hold, the arrived set is a uniformly random subset of its size, and the exact analysis
applies. The compute budget differs across schemes only through the number of workers ``n``
(e.g. 9 uncoded, 18 repetition, 15 UEP workers for K = 9 blocks). Different block counts are
compared through ``Latency.scaled`` (see ``latency``).
"""

from co3cli.simulate.uep.analysis import (
    arrival_pmf, block_energy, class_block_energies, decode_probability,
    decode_probability_vs_time, error_vs_time, recovered_fraction)
from co3cli.simulate.uep.codes import (
    CODES, EEP, MAX_COMPOSITIONS, MDS, RANK_TOL, Code, EwUEP, NowUEP, RandomLinearCode,
    Repetition, Uncoded, even_class_sizes, get_code, register)
from co3cli.simulate.uep.latency import Latency
from co3cli.simulate.uep.matmul import (
    IMPORTANCE, MODES, PARTITIONS, SORT_BY, Partition, coded_matmul, partition)
from co3cli.simulate.uep.montecarlo import MonteCarlo, monte_carlo

__all__ = [
    "CODES", "RANK_TOL", "MODES", "IMPORTANCE", "PARTITIONS", "SORT_BY", "Code", "RandomLinearCode", "Latency",
    "Partition", "MonteCarlo", "register", "get_code", "partition", "coded_matmul",
    "decode_probability", "recovered_fraction", "arrival_pmf", "decode_probability_vs_time",
    "error_vs_time", "block_energy", "class_block_energies", "even_class_sizes", "monte_carlo",
    "MAX_COMPOSITIONS", "Repetition", "Uncoded", "MDS", "NowUEP", "EwUEP", "EEP",
]
