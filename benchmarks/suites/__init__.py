"""Every suite module; importing this package registers their suites (benchmarks.registry.SUITES).

Module -> suites: reference (reference), kernels (kernels), overhead (overhead), partitioners
(partitioners, partition_memory), volume (volume, mop_volume), supergcn (supergcn_volume,
supergcn_accuracy, supergcn_lp), supergcn_ops (supergcn_ops), hongtu (hongtu_dedup), memory (memory,
scale), hyscale (hyscale, hyscale_sampler), generators (generators), ablations (ablations,
ablations-1d; its run matrix in ablations_matrix and its table in ablations_report, which register
none), auto, ingest, linkpred, linkpred_scale, predict, outofcore, diskio, moonshot,
partitioner_scale, scaleout (its steps in scaleout_hosts, its host-loss trial in scaleout_loss and
its SAR peer in sar_peer and sar_worker, which register none), chaos (one each).
"""

from benchmarks.suites import (  # noqa: F401  (each module registers its suites on import)
    ablations,
    auto,
    chaos,
    diskio,
    generators,
    hongtu,
    hyscale,
    ingest,
    kernels,
    linkpred,
    linkpred_scale,
    memory,
    moonshot,
    outofcore,
    overhead,
    partitioner_scale,
    partitioners,
    predict,
    reference,
    scaleout,
    supergcn,
    supergcn_ops,
    volume,
)
