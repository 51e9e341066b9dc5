"""Simulated training through the codec: federated learning and stragglers.

* ``fl`` (``Simulation``, ``run_fl``), ``flconfig`` (``FLConfig``, ``--config``/``--set``,
  sweeps), ``flrun`` (the engines and sweeps behind ``co3 simulate fl``), ``flplot``, ``dist``
  (the same run over ``torch.distributed`` processes, bit-identical): every client upload goes
  through a :mod:`co3cli.compressors` compressor with its :class:`~co3cli.compressors.ErrorFeedback`.
* ``links`` (client link and device specs: values, seeded distributions, CSV traces) and
  ``clock`` (each round's wall-clock time, the deadline, time to target, recomputing a run's
  clock for other links from its ``clients.csv``).
* ``uep``: UEP-coded approximate matrix multiplication against stragglers (codes, exact
  analysis, Monte Carlo, coded back-propagation).
"""
