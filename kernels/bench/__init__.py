"""The benchmarks: every reference kernel timed against eager PyTorch, torch.compile and its peers on one GPU.

    python -m kernels.bench              # the whole suite (kernels.bench.suite)
    python -m kernels.bench.peers        # one part alone: peers, gemm, streaming, compiler, training, capstone
    python -m kernels.bench.headroom     # how far every reference solution clears its grading bars
    python -m kernels.bench.grading      # seconds to grade each notebook
    python -m kernels.bench.scale        # grade-class on one GPU, then one student per GPU
    python -m kernels.bench.hopper       # how far Triton gets on Hopper: attention and cross-entropy variants

Results are data: one JSON file a run in kernels/bench/results/, with its device, versions and date
(kernels/bench/common.py says where each part's runs go). From them alone, without a GPU:

    python -m kernels.bench.report       # docs/benchmarks.md: a class's GPU-hours, then every run, device by device
    python -m kernels.bench.plots        # the figures, next to the runs they are drawn from
"""
