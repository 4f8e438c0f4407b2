"""The benchmarks: every reference kernel timed against eager PyTorch, torch.compile and its peers on one GPU.

    python -m kernels.bench              # the whole suite (kernels.bench.suite)
    python -m kernels.bench.peers        # one part alone: peers, gemm, streaming, compiler, training, capstone
    python -m kernels.bench.headroom     # how far every reference solution clears its grading bars
    python -m kernels.bench.grading      # seconds to grade each notebook

Results are data, kept in kernels/bench/results/ with the device, versions and date of each run.
"""
